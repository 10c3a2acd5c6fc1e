// What the gather and scatter kernels of DML_OPERATOR_RESAMPLE_GRAD (resample_grad) share:
// the data type, the interpolation, the identity axes (IDENTITYd: axis d maps o = i with
// weight 1 and has no table), the per-axis tables computed on the host in exact float32
// (uint words, weights as float32 bits) and dY. Kernel constants follow from id 7.

layout(constant_id = 1) const bool IS_F16 = false;
layout(constant_id = 2) const bool IS_LINEAR = false;
DIMS4(bool, IDENTITY, 3, true)

layout(set = 0, binding = 0) readonly buffer TABLES { uint tables[]; };  // scratch, constant
layout(set = 0, binding = 1) readonly buffer DY { uint dy[]; };  // InputGradientTensor

// acc += v * w for linear (w: the product of the axes' weights), acc += v for nearest. The
// accumulator is `precise` and the linear term one fma: a single rounding that no compiler may
// split or fuse otherwise, so every kernel and every device gives the same bits.
#define ACCUMULATE(acc, v, w) acc = IS_LINEAR ? fma((v), (w), (acc)) : (acc) + (v);
