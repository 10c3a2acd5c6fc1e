// What the gather and scatter kernels of DML_OPERATOR_RESAMPLE_GRAD (resample_grad) share:
// the data type, the interpolation, the identity axes (IDENTITYd: axis d maps o = i with
// weight 1 and has no table), the per-axis tables computed on the host in exact float32
// (uint words, weights as float32 bits) and dY. Kernel constants follow from id 7.

layout(constant_id = 1) const bool IS_F16 = false;
layout(constant_id = 2) const bool IS_LINEAR = false;
DIMS4(bool, IDENTITY, 3, true)

layout(set = 0, binding = 0) readonly buffer TABLES { uint tables[]; };  // scratch, constant
layout(set = 0, binding = 1) readonly buffer DY { uint dy[]; };  // InputGradientTensor

// The canonical order and arithmetic of the gather kernels (resample_grad_gather, its windowed
// form and the walk kernels), fixed by the problem alone, so that every kernel, plan, window,
// workgroup width, subgroup size and device gives the same bits (docs/semantics.md §6.15).
// Each dX element sums its contributors in ascending logical dY order (o0, then o1, o2, o3,
// innermost o3), in float32, from +0:
//   nearest: acc = acc + v per contributor (ACCUMULATE);
//   linear: per row, that is per combination of the contributors along the axes before INNER
//   (the innermost resampled axis; the axes after it are identities, one contributor each),
//   h = +0, then h = h + v * w_INNER over the row's contributors (ACCUMULATE into h), then
//   acc = acc + h * w_outer (ROW_SUM), w_outer the product of the weights of the axes before
//   INNER in axis order, ((w0 * w1) * w2) (identity axes weigh 1, so it is exact where one
//   axis is resampled). One multiply and one add per term and per row, where a weight per
//   term (w_outer * w_INNER) costs two multiplies per term.
// Every multiply and add is a separate operation on a `precise` value (NoContraction): Vulkan
// rounds each correctly, and no compiler may fuse them into an fma or reorder them. GLSL's
// fma() is no help here: Vulkan lets it round once (the H100's does) or twice (a multiply then
// an add), so it differed between devices.
#define ACCUMULATE(acc, v, w) acc = IS_LINEAR ? (acc) + (v) * (w) : (acc) + (v);
#define ROW_SUM(acc, h, w_outer) if (IS_LINEAR) { acc = (acc) + (h) * (w_outer); }

// A finished sum with -0 made +0. The sums above start from +0 and so are never -0, but nothing
// asks the compiler to preserve signed zeros, and lavapipe's folded a first `+0 + v` to `v` in
// the walk kernels where loop counts were constants (a -0 dY gave -0). Integer operations
// cannot be folded that way.
float plus_zero(float v) {
    const uint bits = floatBitsToUint(v);
    return uintBitsToFloat(bits == 0x80000000u ? 0u : bits);
}
vec2 plus_zero(vec2 v) { return vec2(plus_zero(v.x), plus_zero(v.y)); }
