// DML_OPERATOR_ELEMENT_WISE_CLIP_GRAD (element_wise_clip_grad) and ELEMENT_WISE_CLIP_GRAD1
// (element_wise_clip_grad1), one formula for both, on the element-wise template
// (include/elementwise_grad.glsl), from which the build generates their kernels
// element_wise_clip_grad (any strides) and element_wise_clip_grad_packed (16-byte vectors).
//
//   dX = (X <= Min or X >= Max) ? +0 : dY   (a select: bit copies of dY or +0, every type)
//
// X = NaN passes dY. The plan turns Min and Max (CLIP_GRAD: float32 against X converted to
// float32; CLIP_GRAD1: in the tensors' type) into [LOW, HIGH], the order keys of the X that
// pass, so the kernel only compares integers: exact on every device, with no conversion of
// an integer to float (whose rounding Vulkan leaves to the driver) and no float comparison
// (which may flush subnormals). LOW > HIGH: nothing but NaN passes.
//
// The order key of an element: its unsigned bits for unsigned integers, the bits with the sign
// bit flipped for signed integers, SIGN -/+ magnitude for floats (-0 and +0 share one key).

layout(constant_id = PARAMETER_ID(0)) const uint LOW = 1u;
layout(constant_id = PARAMETER_ID(1)) const uint HIGH = 0u;

const bool FLOAT_TYPE = DATA_TYPE == TYPE_FLOAT32 || DATA_TYPE == TYPE_FLOAT16;
const uint SIGN = DATA_TYPE == TYPE_UINT32 || DATA_TYPE == TYPE_UINT16
                  || DATA_TYPE == TYPE_UINT8 ? 0u : 1u << (ELEMENT_BITS - 1u);
const uint INFINITY_BITS = DATA_TYPE == TYPE_FLOAT16 ? 0x7C00u : 0x7F800000u;

uint grad_bits(uint x, uint dy) {
    const uint magnitude = x & ~SIGN;
    const uint key = !FLOAT_TYPE ? x ^ SIGN
                   : (x & SIGN) != 0u ? SIGN - magnitude : SIGN + magnitude;
    const bool nan = FLOAT_TYPE && magnitude > INFINITY_BITS;
    return nan || (LOW <= key && key <= HIGH) ? dy : 0u;
}
