"""cr_div, cr_sqrt, ieee_mul and ieee_add (shaders/include/correctly_rounded.glsl) against numpy,
bit for bit.

The functions promise the correctly rounded float32 quotient and square root (round to nearest
even) with IEEE special cases, NaN results as 0x7FC00000, on every device. numpy's float64
division and square root of float32 operands, rounded to float32, are those results: 53 >=
2 * 24 + 2, so rounding twice never differs from rounding once. The benchmark kernel cr_ops
(benchmarks/shaders/cr_ops.comp) applies the functions per element; PREVIOUS runs them as they
were before the fast paths, i.e. their general paths (cr_div_general, cr_sqrt_general) for
every input, which must give the same bits. Inputs: random bit patterns over the whole range,
subnormals, results near overflow and underflow and at the fast path's exponent limits, exact
quotients and squares, quotients and roots within a hair of a half-way point (constructed in
integers), exact ties (subnormal quotients), powers of two, every pair of special values; and
every case of the fast paths' arithmetic for cr_sqrt (every significand, both exponent
parities) and for cr_div against a few divisors (every dividend significand).
"""

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import seed_of

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_timing import benchmark_program  # noqa: E402

sys.path.remove(str(ROOT / "benchmarks"))

NAN = 0x7FC00000
SPECIALS = np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001,
                     0xFFBFFFFF, 1, 0x80000001, 2, 0x7FFFFF, 0x807FFFFF, 0x400000, 0x800000,
                     0x80800000, 0x800001, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F7FFFFE, 0x7F000000,
                     0x3F800000, 0xBF800000, 0x40000000, 0x3F000000, 0x40400000, 0x3FFFFFFF,
                     0x3F7FFFFF, 0x00FFFFFF, 0x01000000, 0x34000000, 0x4B000000, 0x3F800001,
                     0x3F800002, 0x3F7FFFFE, 0x40000001, 0x407FFFFF, 0x3FFFFFFE, 0x00800001],
                    dtype=np.uint32)


def run_ops(device, kernel, inputs, outputs, constants, rte16=False, push=None):
    """The output words (named `outputs`) of the element-wise benchmark kernel `kernel` (its
    rte16 SPIR-V with rte16) on `inputs` (binding name -> uint32 array, all of one size);
    `push`: its push constants other than the count."""
    runtime = device.runtime()
    n = next(iter(inputs.values())).size
    padded = -(-n // 4) * 4  # buffers hold whole 16-byte vectors
    buffers = {}
    for name, a in inputs.items():
        words = np.zeros(padded, np.uint32)
        words[:n] = a
        buffers[name] = runtime.buffer(4 * padded, words=words)
    buffers.update({k: runtime.buffer(4 * padded) for k in outputs})
    program, words = benchmark_program(device, kernel, buffers, constants, n, rte16, push)
    commands = runtime.commands()
    commands.upload([buffers[k] for k in inputs])
    commands.dispatch(program, words)
    commands.download([buffers[k] for k in outputs])
    commands.submit(kernel)
    out = tuple(buffers[k].words()[:n].copy() for k in outputs)
    for obj in (commands, program, *buffers.values()):
        obj.destroy()
    return out


def run_cr_ops(device, a, b, previous, skew):
    """(quotient bits, root bits) of cr_ops on the uint32 arrays a and b."""
    return run_ops(device, "cr_ops", dict(a=a, b=b), ("quotient", "root"),
                   dict(PREVIOUS=previous, REPEAT=1, SKEW=skew))


def numpy_bits(values):
    """float64 results rounded to float32, as bits; every NaN as 0x7FC00000."""
    with np.errstate(over="ignore"):
        f = values.astype(np.float32)
    bits = f.view(np.uint32).copy()
    bits[np.isnan(f)] = NAN
    return bits


def exact(a, b):
    """a / b and sqrt(a) in float64 (exact in the first case, within 2^-53 in the others)."""
    with np.errstate(all="ignore"):
        fa, fb = (x.view(np.float32).astype(np.float64) for x in (a, b))
        return fa / fb, np.sqrt(fa)


def expected(a, b):
    return tuple(numpy_bits(x) for x in exact(a, b))


def compose(sign, field, significand):
    return ((sign.astype(np.uint32) << 31) | (field.astype(np.uint32) << 23)
            | (significand.astype(np.uint32) & 0x7FFFFF))


def with_exponents(rng, ma, mb, d_range):
    """a, b with significands ma, mb (24-bit, the implicit bit included), random signs and
    normal exponent fields fa, fb drawn so that d = fa - fb + 127 (the quotient's biased
    exponent, or one above it) is uniform in d_range."""
    n = ma.size
    d = rng.integers(d_range[0], d_range[1] + 1, n)
    low, high = np.maximum(1, 128 - d), np.minimum(254, 381 - d)  # 1 <= fa, fb <= 254
    fb = low + (rng.random(n) * (high - low + 1)).astype(np.int64)
    return (compose(rng.integers(0, 2, n), fb + d - 127, ma),
            compose(rng.integers(0, 2, n), fb, mb))


def near_half_quotients(rng, n):
    """Significands with ma / mb within a hair of a half-way point between two float32:
    ma 2^k = t mb - delta for odd t in [2^24, 2^25) and small odd delta (k = 24: the quotient in
    [1, 2), t / 2^24 half-way between two of its floats; k = 25: in [1/2, 1)). Odd mb is
    invertible modulo 2^k, so t = delta / mb mod 2^k, plus 2^24 where k = 24 (t's one
    representative in range; until 2026-12-02 this was missed, and no k = 24 case was drawn),
    kept where ma is a 24-bit significand. Drawn in batches (numpy: the inverse by Newton's
    iteration, x -> x (2 - mb x), each step doubling its correct bits from mb's own 3), not
    one by one in Python (45 s)."""
    mas, mbs, have = [], [], 0
    while have < n:
        mb = rng.integers(1 << 23, 1 << 24, 8 * n, dtype=np.uint64) | np.uint64(1)
        k = rng.choice(np.array([24, 25], np.uint64), mb.size)
        delta = rng.choice(np.array([-3, -1, 1, 3], np.int64), mb.size)
        inverse = mb.copy()  # mb mb = 1 mod 8
        for _ in range(4):  # 3 -> 48 correct bits, arithmetic modulo 2^64
            inverse *= np.uint64(2) - mb * inverse
        t = (delta.astype(np.uint64) * inverse) & ((np.uint64(1) << k) - np.uint64(1))
        t[k == 24] += np.uint64(1 << 24)
        product = t.astype(np.int64) * mb.astype(np.int64) - delta  # < 2^49
        ma = product >> k.astype(np.int64)
        keep = ((t >= 1 << 24) & (t < 1 << 25) & (t & np.uint64(1) == 1)
                & (ma >= 1 << 23) & (ma < 1 << 24))
        assert (ma[keep] << k[keep].astype(np.int64) == product[keep]).all()
        mas.append(ma[keep])
        mbs.append(mb[keep])
        have += int(keep.sum())
    return (np.concatenate(mas)[:n].astype(np.uint32), np.concatenate(mbs)[:n].astype(np.uint32))


def near_half_roots(n, odd):
    """Significands A (times 2^(2j + odd) for any j) with sqrt(A 2^odd) within a hair of a
    half-way point: A 2^(26 + odd) = t^2 - delta for odd t in [2^24, 2^25) and delta = 1 mod 8
    (an odd square modulo 2^m: t by Hensel lifting), so sqrt(A 2^odd) is t / 2^13 (half-way
    between two float32 in [2^11, 2^12)) less about delta / 2^26 units."""
    m, out = 26 + odd, []
    for delta in (d for k in range(1, 4000) for d in (8 * k + 1, 1 - 8 * k)):
        x = 1
        for i in range(3, m):  # x^2 = delta modulo 2^(i + 1)
            if (x * x - delta) % (1 << (i + 1)):
                x += 1 << (i - 1)
        half = 1 << (m - 1)
        for t in {x, -x % (2 * half), (x + half) % (2 * half), (half - x) % (2 * half)}:
            if (1 << 24) <= t < (1 << 25):
                assert (t * t - delta) % (1 << m) == 0
                out.append((t * t - delta) >> m)
        if len(out) >= n:
            break
    return np.array(out[:n], np.float64)


def signed(rng, low, high, n):
    """n uint32 in [low, high) with a random sign bit."""
    return (rng.integers(low, high, n, dtype=np.uint32)
            | (rng.integers(0, 2, n, dtype=np.uint32) << 31))


def cases(rng):
    """(a, b) uint32 arrays: every family of the module docstring."""
    n = 1 << 19
    parts = [rng.integers(0, 1 << 32, (2, 4 * n), dtype=np.uint32)]  # every bit pattern
    a, b = np.meshgrid(SPECIALS, SPECIALS)
    parts.append(np.stack([a.ravel(), b.ravel()]))
    # Subnormal operands (either, both), against normal ones and each other.
    sub, normal = (0x1, 0x800000), (0x800000, 0x7F800000)
    for x, y in ((sub, normal), (normal, sub), (sub, sub)):
        parts.append(np.stack([signed(rng, *x, n), signed(rng, *y, n)]))
    # Results near overflow, near and below the smallest normal, at the fast path's limits.
    for d_range in ((-30, 4), (250, 260), (0, 3), (252, 255), (2, 253)):
        ma, mb = rng.integers(0x800000, 0x1000000, (2, n), dtype=np.uint32)
        parts.append(np.stack(with_exponents(rng, ma, mb, d_range)))
    # Exact quotients: a = q b with 12-bit significands (the product exact in float32).
    q = rng.integers(1 << 11, 1 << 12, n, dtype=np.uint32) << 12
    mb = rng.integers(1 << 11, 1 << 12, n, dtype=np.uint32) << 12
    product = q.astype(np.uint64) * mb.astype(np.uint64)  # in [2^46, 2^48)
    high = product >= (1 << 47)
    ma = np.where(high, product >> 24, product >> 23).astype(np.uint32)
    a, b = with_exponents(rng, ma, mb, (1, 256))
    parts.append(np.stack([a, b]))
    parts.append(np.stack(with_exponents(rng, ma, q, (1, 256))))  # a / q = mb
    # Quotients a hair from half-way.
    parts.append(np.stack(with_exponents(rng, *near_half_quotients(rng, n // 4), (-30, 260))))
    # Exact ties: subnormal quotients t 2^-150 (t odd), a = t 2^(j - 150), b = 2^j.
    t = rng.integers(0, 1 << 22, n // 4, dtype=np.uint32) * 2 + 1
    j = rng.integers(1, 100, n // 4)
    a = (t.astype(np.float64) * np.exp2(j - 150.0)).astype(np.float32)
    assert (a.astype(np.float64) == t * np.exp2(j - 150.0)).all()
    parts.append(np.stack([a.view(np.uint32), np.exp2(j).astype(np.float32).view(np.uint32)]))
    # Powers of two over each other, every pair of exponents.
    fields = np.arange(0, 256, dtype=np.uint32)
    fa, fb = np.meshgrid(fields, fields)
    parts.append(np.stack([fa.ravel() << 23, fb.ravel() << 23]))
    # Square roots: exact squares (12-bit roots) and roots a hair from half-way, scaled by
    # even and odd powers of two (the b's are random normals).
    s = rng.integers(1 << 11, 1 << 12, n, dtype=np.uint32).astype(np.float64)
    scale = np.exp2(rng.integers(-86, 51, n) * 2.0)  # a in [2^-150, 2^126)
    squares = (s * s * scale).astype(np.float32).view(np.uint32)
    parts.append(np.stack([squares, signed(rng, *normal, n)]))
    for odd in (0, 1):
        roots = near_half_roots(n // 8, odd)
        k = roots.size
        scale = np.exp2(rng.integers(-86, 51, k) * 2.0 + odd)
        parts.append(np.stack([(roots * scale).astype(np.float32).view(np.uint32),
                               signed(rng, *normal, k)]))
    a, b = np.concatenate(parts, axis=1)
    return a, b


@pytest.fixture(scope="module")
def inputs():
    """The cases, drawn once for the module's tests (seeded as conftest's rng is)."""
    return cases(np.random.default_rng(seed_of(__name__)
                                       ^ int(os.environ.get("PYVKGRAD_TEST_SEED", "0"))))


@pytest.mark.parametrize("previous, skew", [(False, False), (True, False), (False, True)],
                         ids=["current", "previous", "current-skewed"])
def test_cr_div_and_cr_sqrt_round_correctly(device, inputs, previous, skew):
    """Every input's bits; `skew`: with the fast paths' first estimates moved by up to 15
    units and their reciprocals up to 15 ulp wrong (Vulkan's bounds allow a few ulp), which
    the steps after them must absorb."""
    a, b = inputs
    quotient, root = run_cr_ops(device, a, b, previous, skew)
    want_quotient, want_root = expected(a, b)
    for name, got, want, args in (("cr_div", quotient, want_quotient, (a, b)),
                                  ("cr_sqrt", root, want_root, (a,))):
        wrong = np.flatnonzero(got != want)
        shown = ", ".join(f"{name}({', '.join(f'{x[i]:#010x}' for x in args)}) = "
                          f"{got[i]:#010x}, not {want[i]:#010x}" for i in wrong[:8])
        assert wrong.size == 0, f"{wrong.size} of {a.size} wrong: {shown}"


def test_the_inputs_reach_every_case(inputs):
    """The families hit what they are for: subnormal and overflowing quotients, ties, and
    quotients and roots a hair from half-way (within 2^-20 of a unit; roots within 2^-10), the
    quotients with significands in [1, 2) and in [1/2, 1)."""
    a, b = inputs
    q, r = exact(a, b)
    finite = np.isfinite(q) & (q != 0)
    assert (np.abs(q[finite]) < 2.0**-126).sum() > 10000
    with np.errstate(over="ignore"):
        assert (np.isinf(q.astype(np.float32)) & np.isfinite(q)).sum() > 10000

    def from_half(x):
        """How far x is from the nearest half-way point, in its float32's units."""
        x = np.abs(x[np.isfinite(x) & (x >= 2.0**-126)])
        unit = np.exp2(np.floor(np.log2(x)) - 23)
        return np.abs(x / unit - np.floor(x / unit) - 0.5)

    assert (from_half(q) < 2.0**-20).sum() > 10000
    assert (from_half(r) < 2.0**-10).sum() > 10000
    # ... those quotients with a's significand above b's (quotient significand in [1, 2)) and
    # below it (in [1/2, 1): the result's exponent one lower), both
    with np.errstate(invalid="ignore"):  # signalling NaNs' bits
        fa, fb = (np.abs(x.view(np.float32).astype(np.float64)) for x in (a, b))
    both = ((fa >= 2.0**-126) & (fb >= 2.0**-126) & np.isfinite(fa) & np.isfinite(fb)
            & (np.abs(q) >= 2.0**-126) & np.isfinite(q))
    near = from_half(np.abs(q[both])) < 2.0**-20
    above = fa[both] / np.exp2(np.floor(np.log2(fa[both]))) >= \
        fb[both] / np.exp2(np.floor(np.log2(fb[both])))
    assert (near & above).sum() > 10000 and (near & ~above).sum() > 10000
    ties = np.isfinite(q) & (np.abs(q) < 2.0**-126)
    assert (q[ties] / 2.0**-150 % 2 == 1).sum() > 10000


@pytest.mark.parametrize("skew", [False, True], ids=["current", "current-skewed"])
def test_cr_sqrt_every_significand(device, skew):
    """cr_sqrt's fast path reads a positive normal a as its 24-bit significand and the parity
    of its exponent; the rest only moves the result's exponent field. So every float32 in
    [1, 4) (exponent fields 127 and 128: 2^24 inputs) is every case of its arithmetic (and of
    cr_div's by 1)."""
    a = np.arange(0x3F800000, 0x40800000, dtype=np.uint32)
    b = np.full_like(a, 0x3F800000)
    quotient, root = run_cr_ops(device, a, b, False, skew)
    np.testing.assert_array_equal(quotient, a)
    want = numpy_bits(np.sqrt(a.view(np.float32).astype(np.float64)))
    wrong = np.flatnonzero(root != want)
    assert wrong.size == 0, (f"{wrong.size} wrong, e.g. cr_sqrt({a[wrong[0]]:#010x}) = "
                             f"{root[wrong[0]]:#010x}, not {want[wrong[0]]:#010x}")


@pytest.mark.parametrize("divisor, skew", [(0x3F800001, False), (0x3FFFFFFF, False),
                                           (0x3FC00000, False), (0x3FAAAAAB, False),
                                           (0x3FB504F3, False), (0x3F9E3779, True),
                                           (0x3FF0F0F1, True)])
def test_cr_div_every_dividend_significand(device, divisor, skew):
    """cr_div's fast path reads normal operands as their 24-bit significands; the exponents
    only move the result's exponent field. So every dividend in [1, 2) (2^23 of them; the
    quotient in both of its binades) against a divisor in [1, 2) is every case of its
    arithmetic for that divisor: divisors next to 1 and 2, 1.5, 4/3, sqrt(2) and two more,
    the last two with skewed estimates."""
    a = np.arange(0x3F800000, 0x40000000, dtype=np.uint32)
    b = np.full_like(a, divisor)
    quotient, _ = run_cr_ops(device, a, b, False, skew)
    want, _ = expected(a, b)
    wrong = np.flatnonzero(quotient != want)
    assert wrong.size == 0, (f"{wrong.size} wrong, e.g. cr_div({a[wrong[0]]:#010x}, "
                             f"{divisor:#010x}) = {quotient[wrong[0]]:#010x}, not "
                             f"{want[wrong[0]]:#010x}")


def ieee_inputs(rng, n):
    """Pairs for ieee_mul and ieee_add: random bits; subnormals and small normals with each
    other and with every magnitude; products and sums at and around the subnormal range's
    edges (2^-126, 2^-149, half of 2^-149) and products at the overflow edge; sums with a term
    22-27 binades below the other (ties); exact cancellations; the special values."""
    a = [rng.integers(0, 2**32, n, dtype=np.uint32)]
    b = [rng.integers(0, 2**32, n, dtype=np.uint32)]
    small = lambda: compose(rng.integers(0, 2, n), rng.integers(0, 40, n),  # noqa: E731
                            rng.integers(0, 1 << 23, n))
    anything = lambda: compose(rng.integers(0, 2, n), rng.integers(0, 255, n),  # noqa: E731
                               rng.integers(0, 1 << 23, n))
    a += [small(), small(), anything()]
    b += [small(), anything(), small()]
    # Products near the subnormal range: exponent fields adding up to 90-140.
    fa = rng.integers(1, 140, n)
    fb = np.clip(rng.integers(90, 141, n) - fa, 1, 254)
    a.append(compose(rng.integers(0, 2, n), fa, rng.integers(0, 1 << 23, n)))
    b.append(compose(rng.integers(0, 2, n), fb, rng.integers(0, 1 << 23, n)))
    # Products at the overflow edge: exponent fields adding up to 375-385.
    fa = rng.integers(121, 255, n)
    fb = np.clip(rng.integers(375, 386, n) - fa, 1, 254)
    a.append(compose(rng.integers(0, 2, n), fa, rng.integers(0, 1 << 23, n)))
    b.append(compose(rng.integers(0, 2, n), fb, rng.integers(0, 1 << 23, n)))
    # Sums whose smaller term lies 22 to 27 binades below: half-way and near-half-way cases
    # (significands of all ones or a single bit), both signs.
    fa = rng.integers(28, 255, n)
    low = rng.choice(np.array([0, 0x7FFFFF, 1, 0x400000], np.uint32), n)
    a.append(compose(rng.integers(0, 2, n), fa, rng.choice(np.array([0, 1, 0x7FFFFF]), n)))
    b.append(compose(rng.integers(0, 2, n), fa - rng.integers(22, 28, n), low))
    # Sums of opposite signs within a few units of each other (cancellation), and x - x.
    x = small() | np.uint32(0)
    a += [x, x]
    b += [(x + rng.integers(0, 4, n).astype(np.uint32)) ^ np.uint32(0x80000000),
          x ^ np.uint32(0x80000000)]
    sa, sb = np.meshgrid(SPECIALS, SPECIALS)
    a.append(sa.ravel())
    b.append(sb.ravel())
    return np.concatenate(a), np.concatenate(b)


def test_ieee_mul_and_add_keep_subnormals(device, rng):
    a, b = ieee_inputs(rng, 20000)
    product, total = run_ops(device, "ieee_ops", dict(a=a, b=b), ("product", "sum"), {})
    with np.errstate(all="ignore"):
        fa, fb = a.view(np.float32), b.view(np.float32)
        want = (numpy_bits(fa * fb), numpy_bits(fa + fb))  # IEEE float32, subnormals kept
    for name, got, w in (("ieee_mul", product, want[0]), ("ieee_add", total, want[1])):
        differ = np.flatnonzero(got != w)
        assert differ.size == 0, (name, [(hex(a[i]), hex(b[i]), hex(got[i]), hex(w[i]))
                                         for i in differ[:5]])


# The edges between the float16 conversion's paths, both signs: zero, the smallest normal half
# and just below it, 65504's neighbours up to the first that rounds to Inf, Inf, NaN, float32's
# extremes (its subnormals among them).
HALF_EDGES = np.array([0, 0x38800000, 0x387FFFFF, 0x387FF000, 0x387FEFFF, 0x477FE000,
                       0x477FEFFF, 0x477FF000, 0x477FF001, 0x47800000, 0x7F7FFFFF, 0x7F800000,
                       0x7FC00000, 0x7F800001, 1, 0x007FFFFF, 0x00800000, 0x33000000,
                       0x33000001], np.uint32)
HALF_EDGES = np.concatenate([HALF_EDGES, HALF_EDGES | np.uint32(0x80000000)])


def half_inputs(rng, n_random):
    """float32 bits for a float16 conversion: in every binade of both signs (all 512 sign and
    exponent fields), float16's ties (low 13 bits 0x1000, either parity of the bit above),
    one unit either side of them, exact halves, and the largest low bits; with random
    significands above, and n_random random words."""
    fields = np.arange(512, dtype=np.uint32) << 23
    low = np.array([0, 1, 0xFFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x3000], np.uint32)
    high = rng.integers(0, 1 << 10, 16, dtype=np.uint32) << 13
    structured = (fields[:, None, None] | high[None, :, None] | low[None, None, :]).ravel()
    return np.concatenate([structured, HALF_EDGES,
                           rng.integers(0, 1 << 32, n_random, dtype=np.uint32)])


def half_rows(rng, n_rows):
    """Rows of eight float32 words for halves_from_floats8 (as its (a, b) pairs, a row being
    a[4g + j], b[4g + j] for j < 4): n_rows whose every value takes its one test (+0, normal
    halves of both signs with ties and near-ties, and up to 65520, which only the first
    SPIR-V's test takes), then such rows with one edge value (HALF_EDGES) at each of the eight
    places, so that the test's every bound is crossed by a single value."""
    fields = np.arange(113, 142, dtype=np.uint32) << 23  # 2^-14 up to 2^15
    low = np.array([0, 1, 0xFFF, 0x1000, 0x1001, 0x1FFF, 0x2000], np.uint32)
    pool = (fields[:, None] | low[None, :]).ravel()
    pool = pool | (rng.integers(0, 1 << 10, pool.size, dtype=np.uint32) << 13)
    # +0, and the top binade up to 65504 and (the first SPIR-V's) up to 65520
    pool = np.concatenate([pool, [0, 0x47000000, 0x477FC000, 0x477FE000, 0x477FEFFF]])
    pool = pool.astype(np.uint32)
    signs = np.array([0, 0x80000000], np.uint32)
    shape = (n_rows + 8 * HALF_EDGES.size, 8)
    values = rng.choice(pool, shape) | rng.choice(signs, shape)
    values[values == 0x80000000] = 0  # -0 is an edge, not a fast value
    for k, edge in enumerate(HALF_EDGES):
        for place in range(8):
            values[n_rows + 8 * k + place, place] = edge
    return values[:, 0::2].ravel(), values[:, 1::2].ravel()


@pytest.mark.parametrize("device_rtz,rte16", [(False, False), (True, False), (False, True)],
                         ids=["device", "device_rtz", "rte16"])
def test_half_from_float_rounds_to_nearest_even(device, rng, device_rtz, rte16):
    """load_store.glsl's half_from_float gives numpy's float16 (round to nearest even,
    subnormal halves kept, 65520 and above to Inf) on every input class, with the device's
    own conversion and on a simulated device whose conversion rounds toward zero and flushes
    subnormal halves (Vulkan leaves the rounding undefined): the fast path only ever converts
    values that are halves. NaN: sign | 0x7E00. halves_from_floats gives the same bits, two to
    a word, for pairs of every class (the inputs against a shuffle of themselves, and each
    against itself: both of a pair on the one-conversion path, or one of them off it), and
    halves_from_floats8 four pairs at a time: on those inputs, and on rows of values its one
    test takes, alone and with an edge value at each of the eight places (half_rows).
    rte16: the kernel's rte16 SPIR-V (RoundingModeRTE for 16-bit results: the device converts
    every value whose half is zero, normal or Inf), where the device supports it."""
    if rte16 and not device.info.rounding_mode_rte_float16:
        pytest.skip(f"{device.name} cannot fix its float16 rounding (shaderRoundingModeRTEFloat16)")
    def half_ops(a, b):
        return run_ops(device, "half_ops", dict(a=a, b=b), ("halves", "pairs", "rows"),
                       dict(DEVICE_RTZ=device_rtz), rte16)

    def same(got, want, a, b):
        """got == want word for word; else the first differing inputs and words."""
        differ = np.flatnonzero(got != want)
        assert differ.size == 0, [(hex(a[i]), hex(b[i]), hex(got[i]), hex(want[i]))
                                  for i in differ[:5]]

    a = half_inputs(rng, 50000)
    b = rng.permutation(a)
    b[::3] = a[::3]
    got, pairs, rows = half_ops(a, b)

    def want(words):
        f = words.view(np.float32)
        with np.errstate(over="ignore"):
            bits = f.astype(np.float16).view(np.uint16).astype(np.uint32)
        nan = np.isnan(f)
        bits[nan] = ((words[nan] >> 16) & 0x8000) | 0x7E00
        return bits

    same(got, want(a), a, a)
    want_pairs = want(a) | (want(b) << 16)
    same(pairs, want_pairs, a, b)
    # halves_from_floats8: the same words, four pairs (a row of eight) at a time, on the
    # inputs above (mostly rows it takes pair by pair) and on rows built for its one test.
    n = a.size // 4 * 4
    same(rows[:n], want_pairs[:n], a, b)
    a, b = half_rows(rng, 4000)
    _, _, rows = half_ops(a, b)
    same(rows, want(a) | (want(b) << 16), a, b)
