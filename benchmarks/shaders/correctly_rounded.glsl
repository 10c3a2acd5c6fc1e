// A shim, for adam_optimizer_previous.comp (a link to shaders/adam_optimizer.comp): includes
// resolve beside the including file first, so that kernel gets this file instead of
// shaders/include/correctly_rounded.glsl, and with it the previous cr_div and cr_sqrt
// (correctly_rounded_previous.glsl) under their usual names; pow_uint is the current one.
// benchmarks/investigations/cr_throughput.py times ADAM_OPTIMIZER with both. Benchmark only.
#include "../../shaders/include/correctly_rounded.glsl"
#include "correctly_rounded_previous.glsl"
#define cr_div cr_div_previous
#define cr_sqrt cr_sqrt_previous
