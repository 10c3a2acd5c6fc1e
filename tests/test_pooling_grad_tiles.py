"""The pooling grads' tiles (pyvkgrad/ops/_pooling_grad.py's tile plan, include/pooling_grad.glsl):
an invocation computing a tile of dX gives the per-element gather's bits (TILE_WIDTH = 0 plans
the gather) for every tile shape, geometry, data type and layout, max pooling's with and
without the winners' own pass (ARGMAX_PASS); the average's division by the count is correctly
rounded for every count; the plan tiles the common poolings and falls back to the gather where
a tile would be too large or the loop limit too small."""

import dataclasses
import itertools
import re
from pathlib import Path

import numpy as np
import pytest

import pyvkgrad
from pyvkgrad import reference
from pyvkgrad.ops import _pooling_grad
from pyvkgrad.ops import max_pooling_grad as max_pooling_grad_module
from pyvkgrad.plan import Limits
from pyvkgrad.tensor import DataType, TensorDesc
from test_pooling_grad import assert_same_bits, bits

F32, F16 = DataType.FLOAT32, DataType.FLOAT16
# (TILE_WIDTH, TILE_HEIGHT); None: the plan's default (16 bytes of dX wide, twice the stride
# high where windows overlap along the axis before the last and the tile fits)
TILE_SHAPES = ((1, None), (2, 1), (4, None), (4, 4), (8, 2), (None, None))


def dtype_of(data_type):
    return np.float32 if data_type == F32 else np.float16


def out_sizes(sizes, window, strides, start, end, dilations, ceil):
    out = []
    for n, w, s, p0, p1, d in zip(sizes, window, strides, start, end, dilations):
        room = n + p0 + p1 - (w - 1) * d - 1
        out.append((-(-room // s) if ceil else room // s) + 1)
    return tuple(out)


def strided(a, layout):
    """`a` as a strided view: "packed", "nhwc" (channels last) or "padded" (every row and
    plane padded: gaps between the elements' rows), with its element strides."""
    if layout == "nhwc":
        order = (0,) + tuple(range(2, a.ndim)) + (1,)
        view = np.ascontiguousarray(a.transpose(order)).transpose(np.argsort(order))
    elif layout == "padded":
        big = np.zeros(a.shape[:-1] + (a.shape[-1] + 3,), a.dtype)
        big[..., :a.shape[-1]] = a
        view = big[..., :a.shape[-1]]
    else:
        view = a
    return view, tuple(s // a.itemsize for s in view.strides)


def every_half(rng, shape):
    """All 65,536 float16 bit patterns, shuffled, as an array of `shape` (65,536 elements)."""
    return rng.permutation(np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)).view(
        np.float16).reshape(shape)


def assert_same_bits_nan_as_nan(got, want, what=""):
    """NaN where `want` is NaN (any NaN), the same bits everywhere else."""
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all(), what
    assert_same_bits(np.where(nan, 0, got), np.where(nan, 0, want), what)


def run(device, desc, inputs, width, limits=None, monkeypatch=None, height=None):
    """dX of `desc` on `inputs` (arrays by tensor field) planned with TILE_WIDTH = width and
    TILE_HEIGHT = height.
    Returns (dX, whether the plan tiled); fails where a store left dX's elements (its
    buffer's gaps, zeros from Device.empty, must stay zero)."""
    monkeypatch.setattr(_pooling_grad, "TILE_WIDTH", width)
    monkeypatch.setattr(_pooling_grad, "TILE_HEIGHT", height)
    limits = limits or device.limits
    op = device.compile(desc, limits)
    tensors = {name: device.upload(inputs[name]) if name in inputs else device.empty(d)
               for name, (d, _) in desc.tensor_fields()}
    op(**tensors)
    dx, out = desc.output_gradient_tensor, tensors["output_gradient_tensor"]
    got = out.numpy()
    words = out.storage.host_words("the test's read of dX's gaps")
    flat = words.view(dtype_of(dx.data_type))
    offsets = np.indices(dx.sizes).reshape(len(dx.sizes), -1).T @ np.array(dx.element_strides)
    gaps = np.ones(flat.size, bool)
    gaps[offsets] = False
    assert not bits(flat[gaps]).any(), "a store outside dX's elements"
    return got, desc.plan(limits).dispatches[0].constant("TILED")


def problem(rng, kind, data_type, sizes, window, strides, start, end, dilations, ceil,
            include, layouts):
    """A descriptor and its inputs: dY of random magnitudes (and X of small integers: ties),
    laid out per `layouts` (dY/X, dX)."""
    dt = dtype_of(data_type)
    k = len(sizes) - 2
    out = sizes[:2] + out_sizes(sizes[2:], window, strides, start, end, dilations, ceil)
    scale = (-20, 20) if data_type == F32 else (-14, 10)  # float16: some subnormal, none Inf
    dy = (rng.standard_normal(out) * 2.0 ** rng.integers(*scale, out)).astype(dt)
    x = rng.integers(-3, 4, sizes).astype(dt)
    dy, dy_strides = strided(dy, layouts[0])
    x, x_strides = strided(x, layouts[0])
    dx_strides = strided(np.zeros(sizes, dt), layouts[1])[1]
    dyd = TensorDesc(data_type, out, dy_strides)
    dxd = TensorDesc(data_type, sizes, dx_strides)
    if kind == "avg":
        desc = pyvkgrad.AveragePoolingGradDesc(dyd, dxd, strides, window, start, end, include)
        return desc, {"input_gradient_tensor": dy}
    xd = TensorDesc(data_type, sizes, x_strides)
    desc = pyvkgrad.MaxPoolingGradDesc(xd, dyd, dxd, strides, window, start, end, dilations)
    return desc, {"input_tensor": x, "input_gradient_tensor": dy}


# (sizes, window, strides, padding, dilations, ceil): the benchmark's poolings, overlapping and
# gapped windows, asymmetric geometry, dilation, ceil-rule overhangs, 3-D, sizes 1, primes and
# 255 to 257 along the last axis (vector rows and their tails).
GEOMETRIES = [
    ((2, 3, 8, 16), (2, 2), (2, 2), (0, 0), (1, 1), False),
    ((2, 3, 9, 17), (3, 3), (2, 2), (1, 1), (1, 1), False),
    ((1, 2, 7, 13), (3, 3), (2, 2), (1, 1), (1, 1), True),
    ((1, 2, 5, 11), (3, 3), (1, 1), (1, 1), (1, 1), False),
    ((1, 2, 6, 19), (2, 3), (3, 2), (1, 0), (1, 1), True),
    ((1, 1, 7, 23), (1, 2), (2, 3), (0, 1), (1, 1), False),
    ((1, 2, 9, 10), (2, 2), (1, 2), (1, 1), (2, 2), False),
    ((1, 1, 1, 1), (1, 1), (1, 1), (0, 0), (1, 1), False),
    ((1, 1, 2, 255), (2, 3), (2, 2), (0, 1), (1, 1), True),
    ((1, 1, 3, 256), (3, 3), (2, 2), (1, 1), (1, 1), False),
    ((1, 1, 2, 257), (2, 2), (2, 2), (0, 0), (1, 1), True),
    ((1, 2, 5, 6, 9), (2, 3, 3), (2, 2, 2), (0, 1, 1), (1, 1, 1), False),
    ((1, 1, 3, 4, 7), (1, 2, 2), (1, 2, 1), (0, 0, 1), (1, 1, 2), True),
]


@pytest.fixture(params=[False, True], ids=["one_pass", "argmax_pass"])
def argmax_pass(request, monkeypatch):
    """Max pooling's tiles without and with the winners' own pass (for every geometry)."""
    monkeypatch.setattr(max_pooling_grad_module, "ARGMAX_PASS", request.param)
    return request.param


@pytest.mark.parametrize("kind, argmax", [("avg", None), ("max", False), ("max", True)],
                         ids=["avg", "max-one_pass", "max-argmax_pass"])
@pytest.mark.parametrize("data_type", [F32, F16], ids=["float32", "float16"])
def test_tiles_give_the_gathers_bits(device, rng, monkeypatch, kind, argmax, data_type):
    """Every tile shape, against the gather, packed, channels-last and padded layouts of dY,
    X and dX (a store outside dX's elements fails too)."""
    monkeypatch.setattr(max_pooling_grad_module, "ARGMAX_PASS", argmax)
    tiled = 0
    layouts = itertools.cycle([("packed", "packed"), ("nhwc", "padded"), ("padded", "nhwc"),
                               ("packed", "padded")])
    for (sizes, window, strides, pad, dilations, ceil), layout in zip(GEOMETRIES, layouts):
        if kind == "avg":
            dilations = (1,) * len(window)
        k = len(sizes) - 2
        end = tuple(p + (i % 2) for i, p in enumerate(pad))
        for include in ((False, True) if kind == "avg" else (False,)):
            desc, inputs = problem(rng, kind, data_type, sizes, window, strides, pad, end,
                                   dilations, ceil, include, layout)
            want, was_tiled = run(device, desc, inputs, 0, monkeypatch=monkeypatch)
            assert not was_tiled
            for width, height in TILE_SHAPES:
                got, was_tiled = run(device, desc, inputs, width, monkeypatch=monkeypatch,
                                     height=height)
                tiled += was_tiled
                assert_same_bits(got, want, f"{sizes} {window} {strides} {pad} {dilations} "
                                            f"include={include} {layout} tile {width}x{height}")
        assert k in (2, 3)
    assert tiled >= 40  # most of the geometries and widths fit a tile


@pytest.mark.parametrize("data_type", [F32, F16], ids=["float32", "float16"])
def test_tiles_under_every_plan(device, rng, monkeypatch, data_type, argmax_pass):
    """Workgroup widths 1 to 256, few workgroups (grid-stride loops over tiles) and a loop
    limit that splits the tiles into several dispatches: the gather's bits."""
    base = device.limits
    variants = [dataclasses.replace(base, local_size=wg, max_local_size=wg)
                for wg in (1, 32, 64, 256)]
    variants += [dataclasses.replace(base, local_size=8, max_local_size=8, max_workgroups=3,
                                     max_loop_iterations=loops) for loops in (600, 1200)]
    split = argmax_split = 0
    for kind, (sizes, window, strides, pad) in itertools.product(
            ("avg", "max"), [((2, 3, 9, 20), (3, 3), (2, 2), (1, 1)),
                             ((2, 2, 10, 33), (2, 2), (2, 2), (0, 0)),
                             ((2, 4, 33, 40), (3, 3), (2, 2), (1, 1))]):
        desc, inputs = problem(rng, kind, data_type, sizes, window, strides, pad, pad,
                               (1, 1), False, False, ("nhwc", "packed"))
        want, _ = run(device, desc, inputs, 0, monkeypatch=monkeypatch)
        for limits in variants:
            got, tiled = run(device, desc, inputs, None, limits, monkeypatch)
            assert tiled, limits
            passes = [d.constant("ARGMAX") if kind == "max" else 0
                      for d in desc.plan(limits).dispatches]
            split += len(passes) - passes.count(1) > 1  # the tiles' dispatches
            argmax_split += passes.count(1) > 1  # the winners' pass's
            assert_same_bits(got, want, f"{kind} {sizes} {limits}")
    assert split >= 4
    assert argmax_split >= (2 if argmax_pass else 0)


def test_the_division_by_every_count(device, rng, monkeypatch):
    """dY / count correctly rounded for counts 1 to 144 (past the integer road's 128: cr_div)
    and every kind of float32 (normal, subnormal, zero, infinite, NaN; results subnormal too):
    windows that do not overlap (stride = window), the last one cut short by the ceil rule
    without padding in the divisor, so each dX element is one term; and the same windows
    fitting exactly (every count whole: the plan's WHOLE_WINDOWS, the reciprocal's road for
    counts up to 128 that are not powers of two), with quotients on and beside powers of two
    (d 2^k and its neighbours: the road's step down from a power of two). The sum from +0 is
    float arithmetic: a device may flush a subnormal result to zero there (Vulkan allows it
    without float controls; docs/semantics.md §17), so a GPU may give the flushed oracle
    throughout; lavapipe keeps subnormals."""
    # Specials, and the smallest normals with odd significands: halved or quartered, their
    # quotients are subnormal and some exactly halfway (ties to even).
    specials = np.concatenate([
        np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -3e-39, 1.17549435e-38,
                  3.4028235e38, -2.0**-126, 1.0, 3.0], np.float32),
        (np.array([0x00800001, 0x00800003, 0x80800005, 0x00800006, 0x01000003, 0x00FFFFFF],
                  np.uint32)).view(np.float32)])
    for wh, ww in [(1, 1), (1, 2), (1, 3), (1, 4), (1, 5), (1, 7), (2, 3), (3, 3), (3, 5),
                   (5, 5), (7, 9), (9, 14), (1, 127), (8, 16), (11, 12), (12, 12)]:
        d = wh * ww
        for whole in (False, True):
            sizes = (32, 16, 2 * wh, 3 * ww) if whole else (32, 16, 2 * wh + 1, 3 * ww - 1)
            out = sizes[:2] + out_sizes(sizes[2:], (wh, ww), (wh, ww), (0, 0), (0, 0), (1, 1),
                                        True)
            mantissa = rng.integers(0x800000, 0x1000000, out).astype(np.uint32)
            exponent = rng.integers(0, 256, out).astype(np.uint32)  # subnormal to Inf/NaN
            sign = rng.integers(0, 2, out).astype(np.uint32) << 31
            dy = (sign | (exponent << 23) | (mantissa & 0x7FFFFF)).view(np.float32)
            # d 2^k and its neighbours (quotients a power of two, just below and above it;
            # k down to -126: quotients in the first two binades, where the road leaves)
            k = np.concatenate([np.arange(-126, -120), rng.integers(-120, 100, 58)])
            edges = (np.float32(d) * np.float32(2.0) ** k.astype(np.float32)).astype(np.float32)
            edges = np.concatenate([edges, np.nextafter(edges, np.float32(0)),
                                    np.nextafter(edges, np.float32(np.inf))])
            flat = dy.ravel()
            flat[:specials.size] = specials[:flat.size]
            flat[specials.size:specials.size + edges.size] = edges[:max(0, flat.size
                                                                          - specials.size)]
            desc = pyvkgrad.AveragePoolingGradDesc(TensorDesc(F32, out), TensorDesc(F32, sizes),
                                                   (wh, ww), (wh, ww), (0, 0), (0, 0), False)
            # Each dX element's window and that window's real positions.
            i = np.arange(sizes[2]) // wh
            j = np.arange(sizes[3]) // ww
            rows = np.minimum(wh, sizes[2] - i * wh)
            cols = np.minimum(ww, sizes[3] - j * ww)
            count = rows[:, None] * cols[None, :]
            assert whole <= (count == d).all()  # (1x1 windows never overhang)
            assert desc.plan(Limits()).dispatches[0].constant("WHOLE_WINDOWS") == (
                count == d).all()
            with np.errstate(invalid="ignore"):  # NaN dY
                term = dy[:, :, i][:, :, :, j].astype(np.float64) / count
                want = (np.float32(0) + term.astype(np.float32)).astype(np.float32)  # +0 + term
            subnormal = (want != 0) & (np.abs(want) < np.finfo(np.float32).tiny)
            flushed = np.where(subnormal, np.float32(0), want)  # +0 + a flushed term: +0
            results = []
            for width in (0, None):
                got, _ = run(device, desc, {"input_gradient_tensor": dy}, width,
                             monkeypatch=monkeypatch)
                results.append(got)
                oracle = want
                if device.info.device_type != "cpu" and not (got[subnormal] != 0).any():
                    oracle = flushed  # the device flushes: every subnormal result is +0
                assert_same_bits_nan_as_nan(got, oracle,
                                            f"window {wh}x{ww} whole={whole} width {width}")
            assert_same_bits(*results, f"window {wh}x{ww}: the tiles against the gather")


@pytest.mark.parametrize("window", [(1, 3), (2, 3), (3, 3), (3, 5), (1, 7), (5, 5), (7, 9),
                                    (1, 127)])
def test_the_float16_division_by_every_count(device, rng, monkeypatch, window):
    """Every float16 (all 65,536 bit patterns, shuffled) over whole windows' counts that are
    not powers of two (the float16 road of the reciprocal's division, HALF_BY_INTEGERS):
    windows that do not overlap, each dX one term, the float32 quotient correctly rounded and
    then rounded to float16 (+0 + term), in the gather, and in the tiles where the window
    fits one (1x3, 2x3, 3x5, 1x7; test_tiles_give_the_gathers_bits has 3x3 at stride 2)."""
    out = (1, 1, 256, 256)
    dy = every_half(rng, out)
    sizes = out[:2] + tuple(o * w for o, w in zip(out[2:], window))
    desc = pyvkgrad.AveragePoolingGradDesc(TensorDesc(F16, out), TensorDesc(F16, sizes),
                                           window, window, (0, 0), (0, 0), False)
    assert desc.plan(device.limits).dispatches[0].constant("WHOLE_WINDOWS")
    d = np.float32(window[0] * window[1])
    with np.errstate(invalid="ignore"):
        term = np.float32(0) + dy.astype(np.float32) / d  # float32: correctly rounded
    want = np.repeat(np.repeat(term, window[0], 2), window[1], 3).astype(np.float16)
    for width in (0, None):
        got, tiled = run(device, desc, {"input_gradient_tensor": dy}, width,
                         monkeypatch=monkeypatch)
        assert tiled == (width is None and window in ((1, 3), (2, 3), (3, 5), (1, 7)))
        assert_same_bits_nan_as_nan(got, want, f"window {window} width {width}")


def tile_constants(desc, limits=Limits()):
    d = desc.plan(limits).dispatches[0]
    return {name: d.constant(name) for name in ("TILED", "TILE", "TILES", "WINDOWS",
                                                  "WINDOWS_BEHIND")}, d


def test_the_plans_tiles():
    """Pure: the benchmark's poolings tile 16 bytes of dX wide (and twice the stride high where
    windows overlap and the tile fits), one dispatch over the tiles;
    a window too large, padding past the window's span or a loop limit below a tile's loops
    plan the gather."""
    x32, x16 = TensorDesc(F32, (32, 64, 112, 112)), TensorDesc(F16, (32, 64, 112, 112))
    # 3x3 windows overlap along H: float32 tiles are 4 rows high, float16 ones (8 wide) would
    # pass the bound on positions, so 2.
    for x, width, height in ((x32, 4, 4), (x16, 8, 2)):
        dy = TensorDesc(x.data_type, (32, 64, 56, 56))
        avg = pyvkgrad.AveragePoolingGradDesc(dy, x, (2, 2), (3, 3), (1, 1), (1, 1), True)
        got, d = tile_constants(avg)
        got_avg = got
        assert got == dict(TILED=True, TILE=(1, height, width),
                           TILES=(1, 112 // height, 112 // width),
                           WINDOWS=(1, height // 2 + 1, width // 2 + 1),
                           WINDOWS_BEHIND=(0, 0, 0))
        assert dict(d.push)["count"] == 32 * 64 * 112 * 112 // (height * width)
        mx = pyvkgrad.MaxPoolingGradDesc(x, dy, x, (2, 2), (2, 2), (0, 0), (0, 0), (1, 1))
        got, _ = tile_constants(mx)
        assert got == dict(TILED=True, TILE=(1, 2, width), TILES=(1, 56, 112 // width),
                           WINDOWS=(1, 1, width // 2), WINDOWS_BEHIND=(0, 0, 0))
        assert len(mx.plan(Limits()).dispatches) == 1
        # 3x3 windows overlap: the winners' own pass first (4 windows an invocation), then
        # the tiles reading them; a byte per window in scratch, and a word past the last (the
        # tiles' rows of winners by words may read it).
        mx = pyvkgrad.MaxPoolingGradDesc(x, dy, x, (2, 2), (3, 3), (1, 1), (1, 1), (1, 1))
        plan = mx.plan(Limits())
        argmax, tiles = plan.dispatches
        assert (argmax.constant("ARGMAX"), tiles.constant("ARGMAX")) == (1, 2)
        assert argmax.constant("ARGMAX_ROWS")  # X's rows whole 16-byte vectors
        assert dict(argmax.push)["count"] == 32 * 64 * 56 * 56 // 4
        assert [s.nbytes for s in plan.scratch if s.name == "window_winners"] == [
            32 * 64 * 56 * 56 + 4]
        assert tile_constants(mx)[0] == got_avg
        # Not past the buffer limit: then the tiles scan X themselves.
        low = Limits(max_storage_buffer_range=32 * 64 * 56 * 56 - 4)
        assert [d.constant("ARGMAX") for d in mx.plan(low).dispatches] == [0]
        # The bytes and the word past them fit, the buffer's whole 16-byte units do not.
        low = Limits(max_storage_buffer_range=32 * 64 * 56 * 56 + 12)
        assert [d.constant("ARGMAX") for d in mx.plan(low).dispatches] == [0]
    x = TensorDesc(F32, (1, 1, 20, 20))
    for desc in (pyvkgrad.AveragePoolingGradDesc(x, x, (1, 1), (5, 5), (2, 2), (2, 2), False),
                 pyvkgrad.MaxPoolingGradDesc(x, TensorDesc(F32, (1, 1, 22, 22)), x, (1, 1),
                                             (1, 1), (1, 1), (1, 1), (1, 1))):
        assert not tile_constants(desc)[0]["TILED"]  # 40 windows a tile; padding past 0
    dy = TensorDesc(F32, (1, 1, 10, 10))
    mx = pyvkgrad.MaxPoolingGradDesc(x, dy, x, (2, 2), (3, 3), (1, 1), (1, 1), (1, 1))
    loops = mx.tile_loops(mx.tile_geometry())
    assert tile_constants(mx, Limits(max_loop_iterations=64 + loops))[0]["TILED"]
    assert not tile_constants(mx, Limits(max_loop_iterations=64 + loops - 1))[0]["TILED"]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_tiles_keys_of_special_values(device, rng, monkeypatch, dtype, argmax_pass):
    """Max pooling's tiles on X drawn from signed zeros, infinities, NaN, subnormals and a few
    integers (ties everywhere): the oracle's routing (the first largest, the first NaN), in
    tiles of several shapes and in the gather."""
    tiny = np.finfo(dtype).smallest_subnormal
    pool = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, tiny, -tiny, 2 * tiny, 1.0, -1.0],
                    dtype)
    x = rng.choice(pool, (2, 3, 11, 18))
    geometry = ((2, 2), (3, 3), (1, 1), (1, 1), (1, 1))
    out = out_sizes((11, 18), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), False)
    dy = rng.choice(np.array([1, 2, 4, 8, 16, 32, 64], dtype), (2, 3) + out)
    data_type = F32 if dtype == np.float32 else F16
    xd, dyd = TensorDesc(data_type, x.shape), TensorDesc(data_type, dy.shape)
    desc = pyvkgrad.MaxPoolingGradDesc(xd, dyd, xd, *geometry)
    want = reference.max_pooling_grad(x, dy, *geometry).astype(dtype)  # sums of powers of 2
    for width, height in ((0, None), (2, 1), (4, 4), (None, None)):
        got, _ = run(device, desc, {"input_tensor": x, "input_gradient_tensor": dy}, width,
                     monkeypatch=monkeypatch, height=height)
        assert_same_bits(got, want, f"tile {width}x{height}")


# Float16 poolings whose windows do not overlap ((W - 1) D < S along every axis): the tiles
# work on dY's bits (HALF_TERMS) where each term is a half already: max pooling's, and the
# average's over a whole window of 2^k cells (k = 0 to 4). (kind, window, strides,
# dilations)
HALF_TERM_POOLINGS = [("avg", (2, 2), (2, 2), (1, 1)), ("avg", (1, 2), (1, 3), (1, 1)),
                      ("avg", (1, 1), (2, 2), (1, 1)), ("avg", (2, 4), (2, 4), (1, 1)),
                      ("avg", (2, 8), (2, 8), (1, 1)), ("avg", (2, 1, 2), (2, 1, 2), (1, 1, 1)),
                      ("max", (2, 2), (2, 2), (1, 1)), ("max", (1, 3), (2, 3), (1, 1)),
                      ("max", (2, 2), (3, 5), (2, 2)), ("max", (2, 1, 2), (2, 1, 2), (1, 1, 1))]


@pytest.mark.parametrize("kind, window, strides, dilations", HALF_TERM_POOLINGS)
def test_float16_tiles_on_halves(device, rng, monkeypatch, kind, window, strides, dilations):
    """Every float16 (all 65,536 bit patterns, shuffled) as dY of a pooling whose tiles work
    on halves, packed and channels-last (dX with gaps between its rows): the oracle's bits
    (subnormal quotients rounded to nearest even, a negative one rounded to zero keeping its
    sign, +0 for +-0 dY, Inf kept) and the gather's, NaN for NaN. The tiles' NaN is exact
    (integers): 0x7E00 for the average, dY's sign | 0x7E00 for max pooling (the gather's +0 +
    NaN takes the device's sign)."""
    out = (1, 4, 128, 128) if len(window) == 2 else (1, 4, 16, 32, 32)
    dy = every_half(rng, out)
    sizes = out[:2] + tuple(o * s for o, s in zip(out[2:], strides))
    zeros = (0,) * len(window)
    x = rng.integers(-3, 4, sizes).astype(np.float16)  # max pooling's X: ties
    with np.errstate(invalid="ignore"):
        if kind == "avg":
            want = reference.average_pooling_grad(dy, sizes, strides, window, zeros, zeros,
                                                  False)
        else:
            want = reference.max_pooling_grad(x, dy, strides, window, zeros, zeros, dilations)
    want = want.astype(np.float16)  # one term or none per element: exactly the kernel's
    nan = np.isnan(want)
    nan_bits = np.uint16(0x7E00) | (bits(want) & 0x8000 if kind == "max" else bits(want) & 0)
    for layout in (("packed", "packed"), ("nhwc", "padded")):
        dy_view, dy_strides = strided(dy, layout[0])
        x_view, x_strides = strided(x, layout[0])
        dxd = TensorDesc(F16, sizes, strided(np.zeros(sizes, np.float16), layout[1])[1])
        dyd = TensorDesc(F16, out, dy_strides)
        if kind == "avg":
            desc = pyvkgrad.AveragePoolingGradDesc(dyd, dxd, strides, window, zeros, zeros,
                                                   False)
            inputs = {"input_gradient_tensor": dy_view}
            assert desc.plan(device.limits).dispatches[0].constant("WHOLE_WINDOWS")
        else:
            desc = pyvkgrad.MaxPoolingGradDesc(TensorDesc(F16, sizes, x_strides), dyd, dxd,
                                               strides, window, zeros, zeros, dilations)
            inputs = {"input_tensor": x_view, "input_gradient_tensor": dy_view}
        # the gather, the tiles, and max pooling's tiles reading the winners' own pass
        for width, argmax in ((0, None), (None, None)) + (((None, True),) if kind == "max"
                                                          else ()):
            monkeypatch.setattr(max_pooling_grad_module, "ARGMAX_PASS", argmax)
            got, tiled = run(device, desc, inputs, width, monkeypatch=monkeypatch)
            what = f"{kind} {window} {strides} {layout} width {width} argmax pass {argmax}"
            assert tiled == (width is None), what
            assert_same_bits_nan_as_nan(got, want, what)
            if tiled:
                assert (bits(got)[nan] == nan_bits[nan]).all(), what
    assert (want[~nan] != 0).sum() >= 60000  # every dY reached dX


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_key_vectors_off_their_alignment(device, rng, monkeypatch, dtype):
    """Max pooling 2x2 stride 2 tiles, whose X footprint rows are 16 bytes (KEY_VECTORS), over
    an X whose channels lie half a vector apart: the odd channels' tiles start off a vector
    and load their keys element by element; the gather's bits and the oracle's."""
    sizes, vector = (2, 3, 8, 32), 16 // np.dtype(dtype).itemsize
    plane = sizes[2] * sizes[3] + vector // 2
    flat = np.zeros(sizes[0] * sizes[1] * plane, dtype)
    x = np.lib.stride_tricks.as_strided(
        flat, sizes, tuple(np.dtype(dtype).itemsize * s
                           for s in (sizes[1] * plane, plane, sizes[3], 1)))
    x[...] = rng.integers(-3, 4, sizes)  # ties
    out = sizes[:2] + (sizes[2] // 2, sizes[3] // 2)
    dy = rng.standard_normal(out).astype(dtype)
    data_type = F32 if dtype == np.float32 else F16
    xd = TensorDesc(data_type, sizes, tuple(s // x.itemsize for s in x.strides))
    desc = pyvkgrad.MaxPoolingGradDesc(xd, TensorDesc(data_type, out),
                                       TensorDesc(data_type, sizes), (2, 2), (2, 2), (0, 0),
                                       (0, 0), (1, 1))
    inputs = {"input_tensor": x, "input_gradient_tensor": dy}
    want = reference.max_pooling_grad(x, dy, (2, 2), (2, 2), (0, 0), (0, 0), (1, 1))
    gathered, _ = run(device, desc, inputs, 0, monkeypatch=monkeypatch)
    got, tiled = run(device, desc, inputs, None, monkeypatch=monkeypatch)
    assert tiled
    assert_same_bits(got, gathered, "tiles against the gather")
    assert_same_bits(got, want.astype(dtype), "tiles against the oracle")


def test_tiles_over_windows_all_padding(device, rng, monkeypatch, argmax_pass):
    """End padding past a whole window: the last windows hold no real position (count 0
    without IncludePadding) and add nothing, in tiles as in the gather and the oracle."""
    sizes, window, strides, start, end = (2, 3, 5, 3), (2, 2), (2, 2), (1, 0), (3, 3)
    out = sizes[:2] + out_sizes(sizes[2:], window, strides, start, end, (1, 1), False)
    dy = rng.standard_normal(out).astype(np.float32)
    x = rng.standard_normal(sizes).astype(np.float32)
    dyd, xd = TensorDesc(F32, out), TensorDesc(F32, sizes)
    cases = [(pyvkgrad.AveragePoolingGradDesc(dyd, xd, strides, window, start, end, include),
              {"input_gradient_tensor": dy},
              reference.average_pooling_grad(dy, sizes, strides, window, start, end, include))
             for include in (False, True)]
    cases.append((pyvkgrad.MaxPoolingGradDesc(xd, dyd, xd, strides, window, start, end, (1, 1)),
                  {"input_tensor": x, "input_gradient_tensor": dy},
                  reference.max_pooling_grad(x, dy, strides, window, start, end, (1, 1))))
    for desc, inputs, want in cases:
        gathered, tiled = run(device, desc, inputs, 0, monkeypatch=monkeypatch)
        np.testing.assert_allclose(gathered, want, rtol=1e-6)
        for width in (2, None):
            got, tiled = run(device, desc, inputs, width, monkeypatch=monkeypatch)
            assert tiled
            assert_same_bits(got, gathered, f"{desc.OPERATOR} width {width}")


# (sizes, window, strides, start, end, dilations) for the winners' pass by X's rows, and
# whether the plan takes it in float32 and in float16: the benchmark's 3x3 stride 2, without
# end padding, windows apart (the pass forced on), stride 1 (float16: 4 S is half a vector),
# dilation 2 (float32: 4 vectors a row, the bound; then along both axes), 3-D, stride 4
# (float32: 5 vectors, past the bound), start padding 2 (the first vector all padding) with end
# padding past whole windows (windows all padding: no winner); None: no tiles (float16 tiles
# of those windows pass the bounds on positions or footprint), so no pass.
ROW_GEOMETRIES = [
    ((2, 3, 8, 16), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), (True, True)),
    ((1, 2, 9, 32), (3, 3), (2, 2), (1, 1), (1, 0), (1, 1), (True, True)),
    ((2, 2, 6, 16), (2, 2), (2, 2), (0, 0), (0, 0), (1, 1), (True, True)),
    ((1, 2, 5, 12), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), (True, False)),
    ((1, 1, 12, 24), (2, 3), (2, 2), (1, 2), (1, 2), (1, 2), (True, True)),
    ((1, 1, 12, 24), (2, 3), (2, 2), (1, 2), (1, 2), (2, 2), (True, None)),
    ((1, 2, 4, 6, 16), (2, 2, 3), (2, 2, 2), (0, 0, 1), (0, 0, 1), (1, 1, 1), (True, None)),
    ((1, 2, 3, 5, 16), (2, 1, 3), (1, 1, 2), (1, 0, 1), (0, 0, 1), (1, 1, 1), (True, True)),
    ((1, 1, 4, 16), (3, 3), (4, 4), (1, 1), (1, 1), (1, 1), (False, None)),
    ((1, 2, 6, 16), (3, 3), (2, 2), (2, 2), (3, 7), (1, 1), (True, True)),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_the_winners_pass_by_rows(device, rng, monkeypatch, dtype):
    """Max pooling's winners' pass by X's rows (the kernel's ARGMAX_ROWS: each X row a word's
    4 windows scan loaded once, as 16-byte vectors): taken where the plan says, the oracle's
    routing on X of signed zeros, infinities, NaN, subnormals and small integers (ties
    everywhere), the same bits as the pass by windows and the gather, with X's rows a vector
    longer than its last size (still by rows) and 3 elements longer (rows that do not start
    on vectors: the pass by windows), under workgroup widths 1 to 256 and a loop limit that
    splits the pass."""
    monkeypatch.setattr(max_pooling_grad_module, "ARGMAX_PASS", True)
    tiny = np.finfo(dtype).smallest_subnormal
    pool = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, tiny, -tiny, 2 * tiny, 1.0, -1.0,
                     2.0, 3.0], dtype)
    data_type = F32 if dtype == np.float32 else F16
    base = device.limits
    plans = [base] + [dataclasses.replace(base, local_size=wg, max_local_size=wg)
                      for wg in (1, 256)]
    plans.append(dataclasses.replace(base, local_size=8, max_local_size=8, max_workgroups=1,
                                     max_loop_iterations=700))
    split = 0
    for sizes, window, strides, start, end, dilations, rows in ROW_GEOMETRIES:
        k = len(sizes) - 2
        out = sizes[:2] + out_sizes(sizes[2:], window, strides, start, end, dilations, False)
        x = rng.choice(pool, sizes)
        dy = rng.choice(np.array([1, 2, 4, 8, 16, 32, 64], dtype), out)
        geometry = (strides, window, start, end, dilations)
        want = reference.max_pooling_grad(x, dy, *geometry).astype(dtype)  # sums of powers of 2
        for layout in ("packed", "padded", "wide"):
            if layout == "wide":  # rows a vector longer: still whole vectors (both types)
                big = np.zeros(x.shape[:-1] + (x.shape[-1] + 8,), dtype)
                big[..., :x.shape[-1]] = x
                xs = big[..., :x.shape[-1]]
                x_strides = tuple(st // x.itemsize for st in xs.strides)
            else:
                xs, x_strides = strided(x, layout)
            xd = TensorDesc(data_type, sizes, x_strides)
            desc = pyvkgrad.MaxPoolingGradDesc(xd, TensorDesc(data_type, out),
                                               TensorDesc(data_type, sizes), *geometry)
            inputs = {"input_tensor": xs, "input_gradient_tensor": dy}
            label = f"{sizes} {window} {strides} {start} {dilations} {layout}"
            # (By windows: main's pass, which the other tile tests cover; once here, packed.)
            for by_rows in ((None, False) if layout == "packed" else (None,)):
                monkeypatch.setattr(max_pooling_grad_module, "ARGMAX_ROWS", by_rows)
                for limits in (plans if by_rows is None else plans[:1]):
                    monkeypatch.setattr(_pooling_grad, "TILE_WIDTH", None)  # the plan's tiles
                    monkeypatch.setattr(_pooling_grad, "TILE_HEIGHT", None)
                    passes = [d for d in desc.plan(limits).dispatches
                              if d.constant("ARGMAX") == 1]
                    # (Under the loop limit a tile's loops may pass it: the gather, no pass.)
                    tiles = rows[dtype == np.float16] is not None
                    assert bool(passes) == tiles or limits.max_loop_iterations == 700, label
                    expected = (by_rows is None and layout != "padded"
                                and bool(rows[dtype == np.float16]))
                    assert {d.constant("ARGMAX_ROWS") for d in passes} <= {expected}, label
                    split += expected and len(passes) > 1
                    got, _ = run(device, desc, inputs, None, limits, monkeypatch)
                    assert_same_bits(got, want, f"{label} rows={expected} {limits}")
            gathered, _ = run(device, desc, inputs, 0, monkeypatch=monkeypatch)
            assert_same_bits(gathered, want, f"{label} gather")
        assert k in (2, 3)
    assert split >= 3  # the loop limit split the pass by rows into several dispatches


# Max pooling whose tiles read a row of winners by words (the kernel's WINNER_WORDS: tiles
# whose windows step by a multiple of 4 along the last axis from 0, OUT2 % 4 = 0, at most 8
# windows a row): one tile, rows past dY's bottom and above its top (windows behind the
# tile), a tile whose windows all lie past OUT2, windows past OUT2 at the right (a last row's
# second word past the bytes), 8 windows a row, ceil-rule overhangs, 5-D with windows behind
# along the first axis, and the word-by-word road beside them (float32 tiles over stride 2).
# (sizes, window, strides, start padding, end padding, ceil)
WINNER_WORD_POOLINGS = [
    ((1, 1, 3, 8), (3, 3), (2, 2), (1, 1), (1, 1), False),
    ((2, 3, 9, 40), (3, 3), (2, 2), (1, 1), (1, 1), False),
    ((1, 2, 10, 70), (3, 3), (2, 2), (1, 1), (1, 1), True),
    ((1, 2, 7, 16), (3, 3), (2, 2), (1, 1), (1, 1), False),
    ((1, 1, 3, 6, 24), (1, 3, 3), (1, 2, 2), (0, 1, 1), (0, 1, 1), False),
    ((1, 1, 5, 9), (3, 3), (2, 2), (1, 1), (0, 0), False),
    ((1, 2, 7, 16), (3, 3), (2, 2), (0, 1), (0, 1), False),
    ((1, 2, 6, 16), (3, 1), (1, 1), (1, 0), (1, 0), False),
    ((1, 2, 4, 4, 15), (2, 2, 2), (1, 2, 2), (0, 0, 1), (0, 0, 1), False),
]


def winner_words(dispatch) -> bool:
    """Whether max pooling's tiles dispatch reads rows of winners by words (the kernel's
    WINNER_WORDS, from the dispatch's constants)."""
    c = dispatch.constant
    return (c("ARGMAX") == 2 and c("TILE")[2] // c("STRIDES")[2] % 4 == 0
            and c("WINDOWS_BEHIND")[2] == 0 and c("OUT")[2] % 4 == 0 and c("WINDOWS")[2] <= 8)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_rows_of_winners_by_words(device, rng, monkeypatch, dtype):
    """Max pooling's tiles over the winners' pass, every row of winners read by words (float16)
    or word by word (float32): the gather's bits, nothing stored outside dX, and X and dY of
    every ordering and sign (ties, NaN, -0) included."""
    monkeypatch.setattr(max_pooling_grad_module, "ARGMAX_PASS", True)
    data_type = F16 if dtype == np.float16 else F32
    worded = 0
    for sizes, window, strides, start, end, ceil in WINNER_WORD_POOLINGS:
        desc, inputs = problem(rng, "max", data_type, sizes, window, strides, start, end,
                               (1,) * len(window), ceil, False, ("packed", "packed"))
        x = inputs["input_tensor"]
        x[...] = rng.choice(np.array([-0.0, 0.0, 1.0, -1.0, np.nan, np.inf], dtype), x.shape)
        want, _ = run(device, desc, inputs, 0, monkeypatch=monkeypatch)
        got, tiled = run(device, desc, inputs, None, monkeypatch=monkeypatch)
        assert tiled
        tiles = desc.plan(device.limits).dispatches[-1]
        assert tiles.constant("ARGMAX") == 2
        worded += winner_words(tiles)
        assert_same_bits_nan_as_nan(got, want, f"{sizes} {window} {start} {end} ceil={ceil}")
    assert worded >= (8 if dtype == np.float16 else 1)


def test_the_kernels_bounds_are_the_plans():
    """The pooling kernels' array bounds (#define in the GLSL) are the plan's constants."""
    root = Path(__file__).resolve().parents[1] / "shaders"
    source = (root / "include" / "pooling_grad.glsl").read_text() + (
        root / "max_pooling_grad.comp").read_text()
    defined = dict(re.findall(r"#define (\w+_MAX_\w+) (\d+)", source))
    assert {name: int(value) for name, value in defined.items()} == dict(
        TILE_MAX_CELLS=_pooling_grad.TILE_MAX_CELLS,
        TILE_MAX_WINDOWS=_pooling_grad.TILE_MAX_WINDOWS,
        TILE_MAX_FOOTPRINT=_pooling_grad.TILE_MAX_FOOTPRINT,
        ROW_MAX_VECTORS=max_pooling_grad_module.ROW_MAX_VECTORS)


def test_the_reciprocal_is_rounded_to_nearest_even():
    """Pure: the plan's RECIPROCAL (average pooling's whole-window road) is 1 / d rounded to
    the nearest float32, ties to even, for every count the road takes and a few far larger."""
    from fractions import Fraction
    from pyvkgrad.ops.average_pooling_grad import reciprocal_bits
    for d in list(range(1, 300)) + [12345677, 2**23 + 1, 2**24 - 1, 2**24]:
        bits = reciprocal_bits(d)
        got = Fraction(float(np.uint32(bits).view(np.float32)))
        for neighbour in (bits - 1, bits + 1):
            other = Fraction(float(np.uint32(neighbour).view(np.float32)))
            gap, other_gap = abs(got - Fraction(1, d)), abs(other - Fraction(1, d))
            assert gap < other_gap or (gap == other_gap and bits % 2 == 0), d
