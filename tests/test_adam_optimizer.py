"""ADAM_OPTIMIZER: the spec's worked examples, PyTorch's Adam, and the same bits as a float32
model of the kernel's arithmetic (every operation correctly rounded, in one order); the
operator table's generic tests cover validation, layouts, in place and the buffer limit."""

import numpy as np
import pytest

import pyvkgrad
from pyvkgrad import reference

F32, F16 = np.float32, np.float16
# AD-1..3: lr 0.1, Beta1 0.9, Beta2 0.999, Epsilon 1e-8.
X = np.array([1, -2, 3, 0.5], F32)
M = np.array([0.1, 0, -0.2, 0], F32)
V = np.array([0.01, 0, 0.04, 0], F32)
G = np.array([0.5, -1, 0, 2], F32)
NEW_M = [0.14, -0.1, -0.18, 0.2]
NEW_V = [0.01024, 0.001, 0.03996, 0.004]


def model(x, m, v, g, t, lr, b1, b2, eps):
    """The kernel's arithmetic in numpy float32 (IEEE: each operation correctly rounded,
    subnormals kept): Beta^T by square-and-multiply, least significant bit first; results
    rounded once to the tensors' type."""
    def power(b, t):
        result, p = F32(1), F32(b)
        while t:
            if t & 1:
                result = F32(result * p)
            t >>= 1
            if t:
                p = F32(p * p)
        return result

    lr, b1, b2 = (F32(s) for s in (lr, b1, b2))
    with np.errstate(all="ignore"):
        alpha = np.sqrt(F32(1) - power(b2, t)) / (F32(1) - power(b1, t))
        return step_model(x, m, v, g, F32(lr * F32(alpha)), b1, b2, eps)


def step_model(x, m, v, g, lr_alpha, b1, b2, eps, flush=lambda a: a):
    """One element's step given lr_alpha = LearningRate alpha; `flush` is applied to every
    operand and result of the products and sums (a flushing device's float arithmetic)."""
    b1, b2, eps = (F32(s) for s in (b1, b2, eps))
    with np.errstate(all="ignore"):
        x, m, v, g = (np.asarray(a).astype(F32) for a in (x, m, v, g))
        f = flush
        new_m = f(f(f(b1) * f(m)) + f(f(F32(1) - b1) * f(g)))
        new_v = f(f(f(b2) * f(v)) + f(f(F32(1) - b2) * f(f(g) * f(g))))
        new_x = f(f(x) - f(f(lr_alpha) * new_m) / f(np.sqrt(new_v) + eps))
    return new_x, new_m, new_v


def same_bits(got, want, dtype, zero_signs=True):
    """Bitwise equal but for NaN payloads (and, with zero_signs=False, the signs of zeros)."""
    for a, b in zip(got, want):
        with np.errstate(over="ignore"):  # float16 overflows to Inf, as the kernel does
            b = np.asarray(b).astype(dtype)
        a, b = np.asarray(a), b.reshape(np.shape(a))
        nan = np.isnan(a) & np.isnan(b)
        if not zero_signs:
            nan |= (a == 0) & (b == 0)
        differ = (a.view(np.uint16 if dtype == np.float16 else np.uint32)
                  != b.view(np.uint16 if dtype == np.float16 else np.uint32)) & ~nan
        assert not differ.any(), (np.flatnonzero(differ)[:5], a[differ][:5], b[differ][:5])


@pytest.mark.parametrize("t, alpha", [(1, 0.316227766), (3, 0.202010597), (0, float("nan"))])
def test_worked_examples(device, t, alpha):
    """AD-1, AD-2 (x' within float32 rounding of the float64 formula) and AD-3 (T = 0: x' NaN,
    the moments still right)."""
    x, m, v = pyvkgrad.adam_optimizer(X, M, V, G, t, 0.1, 0.9, 0.999, 1e-8, device=device)
    np.testing.assert_allclose(m, NEW_M, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(v, NEW_V, rtol=2e-5)  # 1 - 0.999 in float32
    want = reference.adam_optimizer(X, M, V, G, t, 0.1, 0.9, 0.999, 1e-8)[0]
    if np.isnan(alpha):
        assert np.isnan(x).all()
    else:
        np.testing.assert_allclose(x, want, rtol=1e-6)
    same_bits((x, m, v), model(X, M, V, G, t, 0.1, 0.9, 0.999, 1e-8), np.float32)


def _wide(rng, n):
    """Values spread over float32's range (magnitudes 1e-30 to 1e30), with zeros and both
    signs: the quotients and roots of the kernel cover the whole exponent range."""
    return (rng.choice([-1, 1], n) * 10.0 ** rng.uniform(-30, 30, n)
            * (rng.random(n) > 0.05)).astype(F32)


@pytest.mark.parametrize("n", [1, 7, 255, 256, 257, 4099])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_same_bits_as_the_float32_model(device, rng, n, dtype):
    """Random data, normal and over the whole range, at sizes around the vector and workgroup
    widths: bitwise the model (division and square root correctly rounded, Beta^T one fixed
    sequence of products, float16 rounded once to nearest even)."""
    for wide in (False, True):
        if wide and dtype == np.float16:
            x, m, g = (rng.standard_normal(n).astype(dtype) * 100 for _ in range(3))
            v = np.abs(rng.standard_normal(n) * 1000).astype(dtype)
        elif wide:
            x, m, v, g = _wide(rng, n), _wide(rng, n), np.abs(_wide(rng, n)), _wide(rng, n)
        else:
            x, m, g = (rng.standard_normal(n).astype(dtype) for _ in range(3))
            v = (0.01 * rng.standard_normal(n) ** 2).astype(dtype)
        t = int(rng.integers(1, 2000))
        scalars = (10.0 ** rng.uniform(-5, 0), rng.uniform(0.5, 0.99), rng.uniform(0.9, 0.9999),
                   float(rng.choice([0.0, 1e-8, 1e-3])))
        got = pyvkgrad.adam_optimizer(x, m, v, g, t, *scalars, device=device)
        same_bits(got, model(x, m, v, g, t, *scalars), dtype)


def test_schedules_share_one_pipeline(device, rng):
    """LearningRate, the Betas and Epsilon are push constants (the float path's limits are
    powers of two, which the usual Betas share): the operators of a schedule (OneCycleLR
    changes the learning rate and Beta1 every step) share one pipeline per data type, so a new
    value compiles no kernel. Each gives the model's bits, and so do the edge values that
    specialise a kernel of their own (zero, subnormal, negative and largest scalars; Betas of
    0 and 1, which take the exact path or give Inf and NaN)."""
    n = 257
    for dtype in (F32, F16):
        x, m, g = (rng.standard_normal(n).astype(dtype) for _ in range(3))
        v = (0.01 * rng.standard_normal(n) ** 2).astype(dtype)
        pyvkgrad.adam_optimizer(x, m, v, g, 3, 1e-3, 0.9, 0.999, 1e-8, device=device)
        runtime = device.runtime()
        made = runtime.pipelines_made
        schedule = [(lr, 0.9, 0.999, 1e-8) for lr in
                    (0.0, 1e-39, 2.0 ** -149, 3e-4, 0.1, 7.5, float(np.finfo(F32).max))]
        schedule += [(4e-3, b1, 0.999, 1e-8) for b1 in np.linspace(0.85, 0.95, 7)]
        schedule += [(1e-3, 0.9, b2, eps) for b2 in (0.998, 0.9985, 0.999)
                     for eps in (0.0, 1e-8, 1e-6, 0.1)]
        for lr, b1, b2, eps in schedule:
            got = pyvkgrad.adam_optimizer(x, m, v, g, 3, lr, b1, b2, eps, device=device)
            same_bits(got, model(x, m, v, g, 3, lr, b1, b2, eps), dtype)
        assert runtime.pipelines_made == made, dtype
        edges = [(1e-3, b1, 0.999, 1e-8) for b1 in (0.0, 1.0, 1e-40, -0.5, 0.3)]
        edges += [(1e-3, 0.9, b2, 1e-8) for b2 in (0.0, 1.0, 2.0 ** -140, 0.9)]
        edges += [(1e-3, 0.9, 0.999, eps) for eps in (1e-42, -1e-3)]
        for lr, b1, b2, eps in edges:
            got = pyvkgrad.adam_optimizer(x, m, v, g, 3, lr, b1, b2, eps, device=device)
            same_bits(got, model(x, m, v, g, 3, lr, b1, b2, eps), dtype)


def _tiny(rng, n):
    """Magnitudes 1e-45 to 1e-5 (float32's subnormals, the kernel's float-path limits around
    1e-31 and 1e-14, small normals), with zeros and both signs."""
    return (rng.choice([-1, 1], n) * 10.0 ** rng.uniform(-45, -5, n)
            * (rng.random(n) > 0.1)).astype(F32)


def _subnormal_steps(x, m, v, g, lr_alpha):
    """Every seventh element from the third: inputs within the float path's limits and a step
    of about 8e-39 (subnormal) from x = 2^-102, where IEEE arithmetic gives x - 2^-126 and a
    flush of the step x (lr_alpha near LearningRate alpha; where the step cannot be made so,
    v = 1)."""
    with np.errstate(over="ignore"):
        want_v = F32((0.9e-30 * float(lr_alpha) / 8e-39) ** 2 / 0.999)
    x[2::7], m[2::7], g[2::7] = F32(2.0 ** -102), F32(1e-30), F32(0)
    v[2::7] = want_v if np.isfinite(want_v) and want_v > 1 else F32(1)


def _subnormal_data(rng, n, lr_alpha, extras):
    """(x, m, v, g), float32: _tiny values; every third element normal, so that each
    workgroup mixes the float and exact paths; from the second, every seventh a step below
    2^-126 next to a small x (m tiny against v of 1); with `extras` (values float16 does not
    hold), _subnormal_steps, and from the fifth every eleventh a step from x = 0 (m 3, v 1:
    subnormal where lr_alpha is), from the sixth m and v 2^100 (Beta m and Beta v normal
    where a Beta is subnormal), and m = Inf at element 7."""
    x, m, g = _tiny(rng, n), _tiny(rng, n), _tiny(rng, n)
    v = np.abs(_tiny(rng, n))
    normal = np.arange(n) % 3 == 0
    for a in (x, m, g):
        a[normal] = rng.standard_normal(normal.sum())
    v[normal] = np.abs(rng.standard_normal(normal.sum()))
    x[1::7], m[1::7], v[1::7] = F32(2.0 ** -100), F32(1e-36), F32(1.0)
    if extras:
        _subnormal_steps(x, m, v, g, lr_alpha)
        x[4::11], m[4::11], v[4::11], g[4::11] = F32(0), F32(3), F32(1), F32(0)
        x[5::11], m[5::11], v[5::11], g[5::11] = F32(0), F32(2.0 ** 100), F32(2.0 ** 100), F32(0)
        m[7] = F32(np.inf)
    return x, m, v, g


@pytest.mark.parametrize("lr, epsilon", [(1e-3, 1e-8), (1e-38, 1e-8), (2e-38, 1e-8),
                                         (1e-3, 1e-42), (0.5, 0.0)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_subnormal_operands_and_results(device, rng, lr, epsilon, dtype):
    """Subnormal inputs, products, sums and steps (m, v, g, x tiny; g^2 below 2^-126; steps
    below 2^-126 against small x; LearningRate alpha or Epsilon subnormal): the IEEE model's
    bits, subnormals kept. A device that flushes subnormals in its float arithmetic (an H200
    does) takes the kernel's exact path for these elements and gives the same bits."""
    # (float16 holds neither the 1e-30 nor the v of _subnormal_steps)
    x, m, v, g = (a.astype(dtype) for a in _subnormal_data(rng, 3001, lr, dtype == np.float32))
    for t in (1, 10):
        got = pyvkgrad.adam_optimizer(x, m, v, g, t, lr, 0.9, 0.999, epsilon, device=device)
        same_bits(got, model(x, m, v, g, t, lr, 0.9, 0.999, epsilon), dtype)


def _flush(a):
    """Subnormals to zeros of their sign, as a flushing device's float arithmetic does."""
    a = np.array(a, F32, copy=True)
    tiny = (a != 0) & (np.abs(a) < F32(2.0 ** -126))
    a[tiny] = np.copysign(F32(0), a[tiny])
    return a


def _run_simulated(device, x, m, v, g, lr_alpha, b1, b2, epsilon, dtype, skew=False):
    """(x', m', v') of the simulated device (benchmarks/shaders/adam_simulated_device.comp) as
    `dtype` (float32, or float16 for float16 values x, m, v, g); `skew`: its root and quotient
    off (the float16 quick step's)."""
    from pyvkgrad.ops.adam_optimizer import step_values
    from test_correctly_rounded import run_ops
    half = dtype == F16
    constants, push = step_values(b1, b2, epsilon, pyvkgrad.DataType.FLOAT16 if half
                                  else pyvkgrad.DataType.FLOAT32)
    constants.update(LR_ALPHA=float(lr_alpha), HALF_OUTPUTS=half, SKEW=skew)
    inputs = {k: np.asarray(a, F32).view(np.uint32) for k, a in dict(x=x, m=m, v=v, g=g).items()}
    words = run_ops(device, "adam_simulated_device", inputs, ("new_x", "new_m", "new_v"),
                    constants, push=push)
    return [w.astype(np.uint16).view(F16) if half else w.view(F32) for w in words]


@pytest.mark.parametrize("lr_alpha, epsilon, b1, b2", [
    (1e-3, 1e-8, 0.9, 0.999), (1e-38, 1e-8, 0.9, 0.999), (1e-39, 1e-8, 0.9, 0.999),
    (1e-3, 1e-42, 0.9, 0.999), (0.5, 0.0, 0.9, 0.999), (1e-3, 1e-8, 2.0 ** -140, 0.999),
    (1e-3, 1e-8, 0.9, 1e-40)])
def test_a_flushing_device_takes_the_exact_path(device, rng, lr_alpha, epsilon, b1, b2):
    """The kernel's element arithmetic (adam_step.glsl, in
    benchmarks/shaders/adam_simulated_device.comp) with every float operation's operands and
    results flushed, as on an NVIDIA H200: still the
    IEEE model's bits, because elements that could meet a subnormal take the exact path. The
    same data through flushing arithmetic alone would differ (checked, so the data reach it)."""
    x, m, v, g = _subnormal_data(rng, 4001, lr_alpha, True)
    lr_alpha = F32(lr_alpha)
    got = _run_simulated(device, x, m, v, g, lr_alpha, b1, b2, epsilon, F32)
    want = step_model(x, m, v, g, lr_alpha, b1, b2, epsilon)
    # Zero signs aside: outside the contract (docs/semantics.md §17); with the simulated
    # flushes lavapipe gave one -0 where IEEE arithmetic gives +0 (-0 - -0).
    same_bits(got, want, np.float32, zero_signs=False)
    flushed = step_model(x, m, v, g, lr_alpha, b1, b2, epsilon, flush=_flush)
    assert any((np.asarray(a).view(np.uint32) != np.asarray(b).view(np.uint32)).any()
               for a, b in zip(flushed, want))



def _half_data(rng, n):
    """(x, m, v, g) float16 values as float32: steps as large as x (so x - step often lies near
    a float16 rounding point), every 13th element num's zero (m = g = 0), and x, m, v and g
    at Inf, NaN, 0, float16's largest and least at the start."""
    x, m, g = (rng.standard_normal(n).astype(F16) for _ in range(3))
    v = (rng.standard_normal(n) ** 2).astype(F16)
    m[::13], g[::13] = 0, 0
    special = np.array([np.inf, -np.inf, np.nan, 0, -0.0, 65504, -65504, 2.0 ** -24], F16)
    for i, a in enumerate((x, m, v, g)):
        a[8 * i:8 * i + 8] = special if a is not v else np.abs(special)
    return tuple(a.astype(F32) for a in (x, m, v, g))


@pytest.mark.parametrize("skew", [False, True])
@pytest.mark.parametrize("epsilon", [1e-8, 0.0])
def test_float16_steps_on_a_device_that_divides_badly(device, rng, skew, epsilon):
    """Float16 tensors take the quick step (adam_step.glsl's half_step: the device's own
    division and square root, checked against float16 rounding points): on the simulated
    device (benchmarks/shaders/adam_simulated_device.comp) whose quotient is off by 2^-17
    (with `skew`; several times Vulkan's bound), and which flushes subnormals, the results are
    still the float32 model's bits rounded to float16. The data reach the check: on many
    elements a quotient off by 2^-17 would change the float16 result (counted)."""
    lr_alpha, b1, b2 = F32(0.5), 0.9, 0.999
    x, m, v, g = _half_data(rng, 20011)
    got = _run_simulated(device, x, m, v, g, lr_alpha, b1, b2, epsilon, F16, skew)
    want = step_model(x, m, v, g, lr_alpha, b1, b2, epsilon)
    same_bits(got, want, F16)
    new_m, new_v = want[1:]
    with np.errstate(all="ignore"):
        q = (lr_alpha * new_m) / (np.sqrt(new_v) + F32(epsilon))
        moved = [(x - F32(q * F32(1 + k * 2.0 ** -17))).astype(F16) for k in (-1, 1)]
        differ = sum((a.view(np.uint16) != want[0].astype(F16).view(np.uint16)) & ~np.isnan(a)
                     for a in moved)
    assert np.count_nonzero(differ) > 20


def test_float16_steps_with_a_negative_epsilon_or_v(device, rng):
    """The quick float16 step needs Epsilon >= 0 and v' >= 0 (a review found both): a negative
    Epsilon that cancels most of sqrt(v') (here to about 2^-9) multiplies the root's error
    (2 ulp on the simulated device) by 2^10, and sqrt of a negative v' is undefined in GLSL
    (the simulated device gives sqrt(|v'|); the model, NaN). Both take the correctly rounded
    pipeline: the model's bits."""
    n = 4096
    b1, b2, lr_alpha = 0.9, 0.999, F32(0.5)
    v, g = np.full(n, 4.0, F16), np.zeros(n, F16)
    m, x = rng.uniform(0.5, 1, n).astype(F16), rng.uniform(-8, 8, n).astype(F16)
    root = np.sqrt(F32(F32(b2) * F32(4)))
    epsilon = float(-F32(root - F32(2.0 ** -9)))  # sqrt(v') + Epsilon about 2^-9
    negative_v = -rng.uniform(0.5, 2, n).astype(F16)
    for v, epsilon in ((v, epsilon), (negative_v, 1e-8)):
        got = _run_simulated(device, x, m, v, g, lr_alpha, b1, b2, epsilon, F16, True)
        same_bits(got, step_model(x, m, v, g, lr_alpha, b1, b2, epsilon), F16)


def test_strided_inputs_and_non_finite_gradients(device, rng):
    """Strided views (the strided kernel) give the packed kernel's bits; Inf and NaN in g reach
    all three outputs of their element, as the formula says."""
    base = [rng.standard_normal((6, 10)).astype(F32) for _ in range(4)]
    base[2] = np.abs(base[2])
    base[3][0, 0], base[3][1, 2] = np.inf, np.nan
    views = [a[:, ::2] for a in base]
    got = pyvkgrad.adam_optimizer(*views, 5, 0.01, 0.9, 0.999, 1e-8, device=device)
    packed = pyvkgrad.adam_optimizer(*(np.ascontiguousarray(a) for a in views), 5, 0.01, 0.9,
                                     0.999, 1e-8, device=device)
    same_bits(got, packed, np.float32)
    same_bits(got, model(*views, 5, 0.01, 0.9, 0.999, 1e-8), np.float32)
    assert np.isnan(got[0][0, 0]) and np.isinf(got[1][0, 0]) and np.isinf(got[2][0, 0])
    assert all(np.isnan(out[1, 1]) for out in got)


def test_the_step_tensor_and_scalars_are_checked_first(device):
    with pytest.raises(TypeError, match="ADAM_OPTIMIZER: TrainingStepTensor"):
        pyvkgrad.adam_optimizer(X, M, V, G, 1.5, 0.1, 0.9, 0.999, 1e-8, device=device)
    with pytest.raises(ValueError, match="ADAM_OPTIMIZER: TrainingStepTensor"):
        pyvkgrad.adam_optimizer(X, M, V, G, -1, 0.1, 0.9, 0.999, 1e-8, device=device)
    with pytest.raises(ValueError, match="ADAM_OPTIMIZER: TrainingStepTensor.Sizes"):
        pyvkgrad.adam_optimizer(X, M, V, G, np.array([1, 2], np.uint32), 0.1, 0.9, 0.999,
                                1e-8, device=device)
    with pytest.raises(TypeError, match="ADAM_OPTIMIZER: TrainingStepTensor"):
        pyvkgrad.adam_optimizer(X, M, V, G, np.array([1.0], F32), 0.1, 0.9, 0.999, 1e-8,
                                device=device)
    with pytest.raises(ValueError, match="ADAM_OPTIMIZER: Beta2"):
        pyvkgrad.adam_optimizer(X, M, V, G, 1, 0.1, 0.9, float("inf"), 1e-8, device=device)


@pytest.mark.parametrize("n", [1000, 1001, 7])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_in_place(device, rng, n, dtype):
    """Outputs bound over their inputs (DirectML allows it): the same bits as separate ones,
    whole 16-byte vectors and a last vector that the elements end in."""
    x, m, g = (rng.standard_normal(n).astype(dtype) for _ in range(3))
    v = np.abs(rng.standard_normal(n)).astype(dtype)
    want = pyvkgrad.adam_optimizer(x, m, v, g, 2, 0.01, 0.9, 0.999, 1e-8, device=device)
    tensors = [device.upload(a) for a in (x, m, v, g, np.array([2], np.uint32))]
    desc = pyvkgrad.AdamOptimizerDesc(*(t.desc for t in tensors), tensors[0].desc,
                                      tensors[1].desc, tensors[2].desc, 0.01, 0.9, 0.999, 1e-8)
    op = device.compile(desc)
    op(input_parameters_tensor=tensors[0], input_first_moment_tensor=tensors[1],
       input_second_moment_tensor=tensors[2], gradient_tensor=tensors[3],
       training_step_tensor=tensors[4], output_parameters_tensor=tensors[0],
       output_first_moment_tensor=tensors[1], output_second_moment_tensor=tensors[2])
    same_bits([t.numpy() for t in tensors[:3]], want, dtype)


def test_a_recording_takes_new_push_constants(device, rng):
    """Recording.update_push_constants: a recorded Adam given a schedule's next LearningRate
    and Beta1 (push constants) without compiling or recording an operator gives the model's
    bits on its next replay; a Beta1 that specialises a kernel of its own is refused (its plan
    dispatches other pipelines), and so is an operator the recording does not hold."""
    n = 1031
    x, m, g = (rng.standard_normal(n).astype(F32) for _ in range(3))
    v = np.abs(rng.standard_normal(n)).astype(F32)
    inputs = [device.upload(a) for a in (x, m, v, g, np.array([4], np.uint32))]
    outputs = [device.empty(inputs[0].desc) for _ in range(3)]

    def desc(lr, b1):
        return pyvkgrad.AdamOptimizerDesc(*(t.desc for t in inputs + outputs), lr, b1, 0.999,
                                          1e-8)

    op = device.compile(desc(0.01, 0.9))
    fields = [f for f, _ in desc(0.01, 0.9).tensor_fields()]
    rec = device.record()
    rec.execute(op, **dict(zip(fields, inputs + outputs)))
    rec.read_back(outputs)
    rec.submit()
    same_bits([t.numpy() for t in outputs], model(x, m, v, g, 4, 0.01, 0.9, 0.999, 1e-8), F32)
    made = device.runtime().pipelines_made
    for lr, b1 in ((0.02, 0.8), (3e-4, 0.95), (-0.0, 0.95)):
        assert op.scalar_plan(desc(lr, b1)) is not None
        rec.update_push_constants(op, desc(lr, b1))
        rec.replay()
        same_bits([t.numpy() for t in outputs], model(x, m, v, g, 4, lr, b1, 0.999, 1e-8), F32)
    assert device.runtime().pipelines_made == made
    rec.update_push_constants(op, desc(0.02, 0.8))
    with pytest.raises(RuntimeError, match="no run since update_push_constants"):
        rec.kernel_times_ns()
    with pytest.raises(ValueError, match="more than push-constant scalars"):
        rec.update_push_constants(op, desc(0.01, 0.3))  # Beta1 < 1/2: a kernel of its own
    # Other tensors (the packed kernel takes the count as a push constant, but the recording
    # binds these buffers): refused.
    shorter = pyvkgrad.TensorDesc(pyvkgrad.DataType.FLOAT32, (n - 1,))
    with pytest.raises(ValueError, match="more than push-constant scalars"):
        rec.update_push_constants(op, pyvkgrad.AdamOptimizerDesc(
            *[shorter] * 4, inputs[4].desc, *[shorter] * 3, 0.01, 0.9, 0.999, 1e-8))
    with pytest.raises(ValueError, match="not recorded here"):
        rec.update_push_constants(device.compile(desc(0.01, 0.9)), desc(0.02, 0.9))
    op.close()
    with pytest.raises(pyvkgrad.ClosedError):
        rec.update_push_constants(op, desc(0.02, 0.9))


@pytest.mark.parametrize("prefetch", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_many_passes_an_invocation_in_place(device, rng, monkeypatch, prefetch, dtype):
    """Packed tensors in 2 workgroups of 4 lanes (dozens of passes an invocation, each
    loading the next pass's words ahead or not), whole and cut into dispatches under a loop
    limit, the outputs bound over the inputs: the model's bits, which are the same for both,
    and the same as a default grid's. Sizes end inside a word and a vector."""
    import dataclasses
    from pyvkgrad.ops import adam_optimizer as module
    from pyvkgrad.plan import LOOP_MARGIN

    monkeypatch.setattr(module, "PREFETCH", prefetch)
    narrow = dataclasses.replace(device.limits, max_workgroups=2, local_size=4,
                                 max_local_size=4)
    cut = dataclasses.replace(narrow, max_loop_iterations=LOOP_MARGIN + 2 * 33 + 2 * 3 + 40)
    for n in (8 * 4 * 2 * 9 + 5, 1001):
        x, m, g = (rng.standard_normal(n).astype(dtype) for _ in range(3))
        v = np.abs(rng.standard_normal(n)).astype(dtype)
        want = model(x, m, v, g, 3, 0.01, 0.9, 0.999, 1e-8)
        for limits in (narrow, cut, None):
            tensors = [device.upload(a) for a in (x, m, v, g, np.array([3], np.uint32))]
            desc = pyvkgrad.AdamOptimizerDesc(*(t.desc for t in tensors), tensors[0].desc,
                                              tensors[1].desc, tensors[2].desc, 0.01, 0.9,
                                              0.999, 1e-8)
            op = device.compile(desc, *([limits] if limits else []))
            if limits is cut:
                assert len(op.plan.dispatches) > 1
            assert dict(op.plan.dispatches[0].constants)["PREFETCH"] == prefetch
            op(input_parameters_tensor=tensors[0], input_first_moment_tensor=tensors[1],
               input_second_moment_tensor=tensors[2], gradient_tensor=tensors[3],
               training_step_tensor=tensors[4], output_parameters_tensor=tensors[0],
               output_first_moment_tensor=tensors[1], output_second_moment_tensor=tensors[2])
            same_bits([t.numpy() for t in tensors[:3]], want, dtype)


def test_matches_torch_adam(device, rng):
    """PyTorch's Adam with eps = Epsilon / sqrt(1 - Beta2^T), after T - 1 earlier steps' state,
    one step: within float32 rounding (float32 Beta^T: a few ulp of alpha)."""
    from torch_support import require
    torch = require("torch")
    x, m, g = (rng.standard_normal(300).astype(F32) for _ in range(3))
    v = (0.01 * rng.standard_normal(300) ** 2).astype(F32)
    # The hyperparameters as the float32 values DirectML's FLOAT fields hold.
    t, lr, b1, b2, eps = 7, *(float(F32(s)) for s in (1e-3, 0.9, 0.999, 1e-8))
    p = torch.nn.Parameter(torch.tensor(x))
    opt = torch.optim.Adam([p], lr=lr, betas=(b1, b2), eps=eps / np.sqrt(1 - b2**t),
                           foreach=False)
    opt.state[p] = dict(step=torch.tensor(float(t - 1)), exp_avg=torch.tensor(m),
                        exp_avg_sq=torch.tensor(v))
    p.grad = torch.tensor(g)
    opt.step()
    got = pyvkgrad.adam_optimizer(x, m, v, g, t, lr, b1, b2, eps, device=device)
    # PyTorch updates m as m + (g - m)(1 - Beta1) (lerp): a few roundings of |m| + |g| apart.
    assert np.all(np.abs(got[1] - opt.state[p]["exp_avg"].numpy())
                  <= 2.0**-21 * (np.abs(m) + np.abs(g)))
    np.testing.assert_allclose(got[2], opt.state[p]["exp_avg_sq"].numpy(), rtol=1e-5)
    want = p.detach().numpy()
    assert np.all(np.abs(got[0] - want) <= 2.0**-22 * np.abs(x) + 1e-4 * np.abs(want - x))


def test_float16_rounding_of_every_half_squared(device):
    """Beta1 = Beta2 = 0 makes m' = g and v' = g g: over every finite float16 g, v' is the
    float32 square rounded once to nearest even into float16 (subnormal halves, ties, overflow
    to Inf), and m' is g itself (as a value: 0 m + 1 g is +0 for g = -0 in IEEE arithmetic,
    which lavapipe gives, but Vulkan need not keep signed zeros without float controls)."""
    g = np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    g = g[np.isfinite(g)]
    zeros = np.zeros_like(g)
    _, m, v = pyvkgrad.adam_optimizer(zeros, zeros, zeros, g, 1, 0.1, 0.0, 0.0, 1e-8,
                                      device=device)
    assert np.array_equal(m, g)
    with np.errstate(over="ignore"):
        want = (g.astype(F32) * g.astype(F32)).astype(np.float16)
    assert np.array_equal(v.view(np.uint16), want.view(np.uint16))
