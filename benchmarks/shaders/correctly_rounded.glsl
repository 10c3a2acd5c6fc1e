// A shim, for adam_optimizer_previous.comp (a link to shaders/adam_optimizer.comp): includes
// resolve beside the including file first, so that kernel gets this file instead of
// shaders/include/correctly_rounded.glsl, and with it cr_div and cr_sqrt as they were before
// their fast paths: the general paths (cr_div_general, cr_sqrt_general, the previous code
// unchanged) for every input. benchmarks/investigations/cr_throughput.py times ADAM_OPTIMIZER
// with both. Benchmark only.
#include "../../shaders/include/correctly_rounded.glsl"
#define cr_div cr_div_general
#define cr_sqrt cr_sqrt_general
