// What the gather and scatter kernels of DML_OPERATOR_RESAMPLE_GRAD (resample_grad) share:
// the data type, the interpolation, the identity axes (IDENTITYd: axis d maps o = i with
// weight 1 and has no table), the per-axis tables computed on the host in exact float32
// (uint words, weights as float32 bits) and dY. Kernel constants follow from id 7.

layout(constant_id = 1) const bool IS_F16 = false;
layout(constant_id = 2) const bool IS_LINEAR = false;
DIMS4(bool, IDENTITY, 3, true)

layout(set = 0, binding = 0) readonly buffer TABLES { uint tables[]; };  // scratch, constant
layout(set = 0, binding = 1) readonly buffer DY { uint dy[]; };  // InputGradientTensor

// The gather kernels' arithmetic, the same in each so that every kernel gives the same bits on
// a device (accumulators are `precise`, every linear step one fma, which no compiler may split
// or fuse otherwise; Vulkan lets a device's fma round once, as the H100's does, or twice, as a
// multiply then an add, as lavapipe's does, so two devices may differ in the last bits):
//   nearest: acc += v per contributor (ACCUMULATE);
//   linear: per combination of the outer contributors, the contributors along the innermost
//   resampled axis first, h = fma(v, w_inner, h) from 0 (ACCUMULATE into h), then
//   acc = fma(h, w_outer, acc) (ROW_SUM), w_outer the product of the other axes' weights in
//   axis order. One multiply-add per term and one per row, where a weight per term (w_outer *
//   w_inner) costs two per term.
#define ACCUMULATE(acc, v, w) acc = IS_LINEAR ? fma((v), (w), (acc)) : (acc) + (v);
#define ROW_SUM(acc, h, w_outer) if (IS_LINEAR) { acc = fma((h), (w_outer), (acc)); }

// A finished sum with -0 made +0. The sums above start from +0 and so are never -0, but nothing
// asks the compiler to preserve signed zeros, and lavapipe's folded a first `+0 + v` to `v` in
// the walk kernels where loop counts were constants (a -0 dY gave -0). Integer operations
// cannot be folded that way.
float plus_zero(float v) {
    const uint bits = floatBitsToUint(v);
    return uintBitsToFloat(bits == 0x80000000u ? 0u : bits);
}
vec2 plus_zero(vec2 v) { return vec2(plus_zero(v.x), plus_zero(v.y)); }
