"""RESAMPLE_GRAD's default ("gather") algorithm gives the same bits whatever the plan (issue 29):
every dX element sums its terms in one canonical order fixed by the problem alone
(docs/semantics.md §6.15, shaders/include/resample_grad.glsl), so the walk kernels, the general
gather, the windowed gather with any window (as a driver's loop limit cuts it), any workgroup
width or count, any subgroup padding and the one-call function's cuts all give the default
plan's bits, which also match the float64 oracle within the operator's tolerance.

Every kernel computes each multiply and add separately, each rounded (no fma, which Vulkan lets
a device round once or twice), so a conforming device gives these bits too; lavapipe is the
device here, and the linear arithmetic itself is pinned by
test_resample_grad.py::test_linear_sums_are_the_documented_arithmetic.
"""

import dataclasses
import math

import numpy as np
import pytest

import pyvkgrad
from pyvkgrad import DataType, TensorDesc
from pyvkgrad.plan import LOOP_MARGIN, Limits
from pyvkgrad.tensor import packed_strides
from cases import DTYPES, assert_same_bits_on_other_widths, random_array, strided_view
from test_resample_grad import (LIN, NN, _Choice, array_strides, assert_close, assert_same_bits,
                                oracle)

# (name, dY sizes, dX sizes, offsets: "half" (half-pixel, DirectMLX's default) or "random"
# (uneven weights), layout: "packed", "strided" (dY every other element of a permuted array,
# dX with gaps) or "nhwc" (both channels-last)). Forward upsampling gives each dX element many
# terms; downsampling leaves some with none.
CASES = [
    ("1 axis, up", (3, 40), (3, 7), "random", "packed"),
    ("1 axis, outer, up", (3, 20, 4), (3, 6, 4), "half", "strided"),
    ("1 axis, down", (2, 5), (2, 13), "random", "packed"),
    ("2 axes, up, NCHW", (2, 3, 12, 10), (2, 3, 6, 5), "half", "packed"),
    ("2 axes, up, NHWC", (2, 4, 12, 10), (2, 4, 5, 4), "random", "nhwc"),
    ("2 axes, down, strided", (2, 3, 5, 4), (2, 3, 11, 9), "random", "strided"),
    ("3 axes, mixed", (7, 6, 5), (3, 4, 9), "random", "packed"),
    ("4 axes, up, strided", (3, 5, 6, 7), (2, 3, 4, 5), "random", "strided"),
    ("4 axes, down", (2, 2, 3, 3), (3, 4, 5, 6), "half", "packed"),
    ("many terms", (1, 2, 64, 48), (1, 2, 2, 3), "random", "packed"),
    # More terms per element than lavapipe's loop limit (65535): windowed on the device itself.
    ("beyond 65535 terms", (1, 2, 512, 512), (1, 2, 2, 2), "half", "packed"),
    # Neighbouring elements of unequal rows (1 or 2 terms along the inner axis), beyond the limit:
    # lavapipe runs them in lockstep and counts the loops of the slowest.
    ("unequal rows, beyond 65535 terms", (70000, 3, 3), (1, 2, 2), "half", "packed"),
]
# Walk options (_WALK_DEFAULTS in pyvkgrad/ops/_resample_grad_plan.py) that change how the
# walk kernels cover dX and skip terms, never the order.
WALK_CHOICES = [dict(rows=1), dict(rows=5, switch=False), dict(cols=2, zero_weights=True),
                dict(select=False), dict(lanes="q", pad=True), dict(pair=False, cols=1)]
MAX_WINDOWS = 64  # windows per forced plan: each dispatch holds its own pipeline state


def problem(rng, case, dtype, mode):
    """(ResampleGradDesc, dY array in the case's layout)."""
    _, dy_sizes, dx_sizes, offsets, layout = case
    rank = len(dy_sizes)
    scales = tuple(a / b for a, b in zip(dy_sizes, dx_sizes))
    if offsets == "half":
        ioff, ooff = (0.5,) * rank, (-0.5,) * rank
    else:  # random on the resampled axes, so that weights are uneven
        ioff = tuple(0.5 if s == 1 else float(rng.uniform(-0.7, 0.7)) for s in scales)
        ooff = tuple(-0.5 if s == 1 else float(rng.uniform(-0.7, 0.7)) for s in scales)
    dx_strides = None
    if layout == "strided":
        dy = strided_view(rng, dy_sizes, dtype)
        dx_strides = tuple(2 * s for s in packed_strides(dx_sizes))
    elif layout == "nhwc":  # NCHW logical order, channels innermost in memory
        n, c, h, w = dy_sizes
        dy = random_array(rng, (n, h, w, c), dtype).transpose(0, 3, 1, 2)
        n, c, h, w = dx_sizes
        dx_strides = (h * w * c, 1, w * c, c)
    else:
        dy = random_array(rng, dy_sizes, dtype)
    dt = DataType.FLOAT32 if dtype == np.float32 else DataType.FLOAT16
    desc = pyvkgrad.ResampleGradDesc(TensorDesc(dt, dy_sizes, array_strides(dy)),
                                     TensorDesc(dt, dx_sizes, dx_strides), mode, scales, ioff,
                                     ooff)
    return desc, dy


def canonical_sums(dy, desc):
    """dX in the canonical order and arithmetic (docs/semantics.md §6.15), on the host, so the
    bits owe nothing to the device: per dX element its terms in ascending logical dY order;
    nearest, their float32 sum from the first on; linear, per row (a combination of the
    contributors before the innermost resampled axis R), h = the float32 sum of the rounded
    products dY * w_R along R, then the float32 sum over the rows of the rounded products
    h * w_outer, w_outer the weights before R multiplied left to right in float32. Every
    multiply and add rounds to float32; np.add.accumulate adds strictly in order. A float16 dX
    rounds the sum once."""
    maps = desc.axis_maps()
    linear = desc.interpolation_mode == pyvkgrad.InterpolationMode.LINEAR
    resampled = [d for d, m in enumerate(maps) if not m.identity]
    inner = resampled[-1] if resampled else 0
    dy32 = np.asarray(dy, np.float32)

    def contributors(d, i):  # (outputs, weights) of dX index i along axis d, ascending
        m = maps[d]
        if m.identity:
            return np.array([i]), np.ones(1, np.float32)
        lo, hi = int(m.counts[i]), int(m.counts[i + 1])
        first = lo if m.begin is None else int(m.begin[i])
        weights = m.weights[lo:hi] if linear else np.ones(hi - lo, np.float32)
        return np.arange(first, first + hi - lo), weights.astype(np.float32)

    dx = np.zeros(desc.output_gradient_tensor.sizes, np.float32)
    for index in np.ndindex(*dx.shape):
        outs, weights = zip(*(contributors(d, i) for d, i in enumerate(index)))
        terms = dy32[np.ix_(*outs)]  # axes after `inner` have one term each
        if terms.size == 0:
            continue
        if not linear:
            dx[index] = np.add.accumulate(terms.reshape(-1))[-1]
            continue
        rows = terms.reshape(-1, terms.shape[inner])
        h = np.add.accumulate(rows * weights[inner], axis=1)[:, -1]
        w_outer = np.ones(1, np.float32)
        for d in range(inner):  # row-major over the axes before `inner`
            w_outer = (w_outer[:, None] * weights[d][None, :]).reshape(-1)
        dx[index] = np.add.accumulate(h * np.broadcast_to(w_outer, h.shape))[-1]
    return dx.astype(np.asarray(dy).dtype)


def run(device, desc, dy, gather=None, limits=None):
    """(dX, kernels) of `desc` on dy, planned with `gather` options and `limits`; dX poisoned
    with NaN first, so that an element left unwritten shows."""
    op = device.compile(_Choice(desc, gather), limits=limits)
    tdx = device.empty(desc.output_gradient_tensor)
    tdx.write(np.full(desc.output_gradient_tensor.sizes, np.nan, dy.dtype))
    op(input_gradient_tensor=device.upload(dy), output_gradient_tensor=tdx)
    out, kernels = tdx.numpy(), [d.kernel for d in op.plan.dispatches]
    op.close()
    return out, kernels


def most_terms(desc):
    """The most terms any dX element sums (the product over axes of the most contributors)."""
    return math.prod(1 if m.identity else int(np.diff(m.counts.astype(np.int64)).max())
                     for m in desc.axis_maps())


def window_sizes(terms, limits):
    """Windows of several lengths, one term up to nearly all, MAX_WINDOWS at most per plan,
    and none longer than the device's own loop limit allows (one element per invocation)."""
    longest = (limits.max_loop_iterations - LOOP_MARGIN - 8
               if limits.max_loop_iterations else terms)
    sizes = {1, 2, 3, 7, terms // 3 + 1, terms - 1, longest}
    return sorted(w for w in sizes if 1 <= w <= min(terms, longest)
                  and -(-terms // w) <= MAX_WINDOWS)


def loop_limit(window):
    """A loop limit whose windowed gather takes windows of `window` terms, with one element per
    invocation (shaders/resample_grad_gather_windowed.comp: L + 1 iterations an element and the
    grid loop's; _windows counts L + 8)."""
    return LOOP_MARGIN + window + 8


def plans(device, desc):
    """(what, gather options, limits) for every plan family the problem can take."""
    base = device.limits
    terms = most_terms(desc)
    choices = [("general gather", {"kernel": "gather"}, None),
               ("walk", {"kernel": "walk"}, None)]
    choices += [(f"walk {o}", dict(o, kernel="walk"), None) for o in WALK_CHOICES]
    choices.append(("walk padded to subgroups of 4", {"kernel": "walk", "pad": True},
                    dataclasses.replace(base, subgroup_size=4)))
    choices += [(f"windows of {w}", {"kernel": "gather", "window": w}, None)
                for w in window_sizes(terms, base)]
    for wg in (32, 64, 128, 256):
        narrow = dataclasses.replace(base, local_size=wg, max_local_size=wg)
        choices += [(f"workgroups of {wg}", None, narrow),
                    (f"general gather, workgroups of {wg}", {"kernel": "gather"}, narrow)]
    # One invocation for every element: each window as long as the device's limit allows
    # with several elements per invocation.
    one = dataclasses.replace(base, local_size=1, max_local_size=1, max_workgroups=1)
    choices += [("one invocation", None, one),
                ("general gather, one invocation", {"kernel": "gather"}, one)]
    few = dataclasses.replace(base, local_size=32, max_local_size=32, max_workgroups=3)
    few_window = max(5, -(-terms // MAX_WINDOWS))
    choices += [("3 workgroups of 32", None, few),
                ("general gather, 3 workgroups of 32", {"kernel": "gather"}, few),
                (f"windows of {few_window}, 3 workgroups of 32",
                 {"kernel": "gather", "window": few_window}, few)]
    # A driver's loop limit: the plan itself cuts the windows (the walk and the unwindowed
    # gather give way where they would pass it).
    for w in window_sizes(terms, base):
        if w < terms:
            limited = dataclasses.replace(base, max_loop_iterations=loop_limit(w))
            choices.append((f"loop limit {loop_limit(w)}", None, limited))
    return choices


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", [NN, LIN])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_every_plan_gives_the_default_plans_bits(device, rng, case, mode, dtype):
    desc, dy = problem(rng, case, dtype, mode)
    want, default_kernels = run(device, desc, dy)
    expected, magnitude = oracle(dy, desc.output_gradient_tensor.sizes, mode, desc.scales,
                                 desc.input_pixel_offsets, desc.output_pixel_offsets)
    assert_close(want, expected, magnitude, dtype, f"default plan {default_kernels}")
    assert_same_bits(want, canonical_sums(dy, desc), f"canonical sums {default_kernels}")
    families = {tuple(default_kernels)}
    for what, gather, limits in plans(device, desc):
        try:
            got, kernels = run(device, desc, dy, gather, limits)
        except ValueError as e:  # a walk option the layout cannot take, or no walk at all
            assert gather and gather.get("kernel") == "walk", f"{what}: {e}"
            continue
        assert_same_bits(got, want, f"{what} {kernels} (default {default_kernels})")
        families.add(tuple(kernels))
    # The windowed gather ran, and the unwindowed one unless the device's own loop limit
    # windows every plan (the walk too, where at most two axes are resampled and their
    # columns read few enough terms).
    names = {k for f in families for k in f}
    assert "resample_grad_gather_windowed" in names, families
    assert ("resample_grad_gather" in names
            or default_kernels[0] == "resample_grad_gather_windowed"), families


@pytest.mark.parametrize("mode", [NN, LIN])
def test_special_values_take_the_same_bits_in_every_plan(device, rng, mode):
    """Infinities, NaN, -0, subnormals and float32 overflow in dY: every plan gives the same
    bits (NaN where the default plan has NaN), windows cutting rows included."""
    for dtype in DTYPES:
        desc, dy = problem(rng, CASES[3], dtype, mode)
        dy = np.array(dy)
        flat = dy.reshape(-1)
        picks = rng.choice(flat.size, 12, replace=False)
        tiny = np.finfo(dtype).smallest_subnormal
        flat[picks] = np.array([np.inf, -np.inf, np.nan, -0.0, -0.0, tiny, -3 * tiny, 2 * tiny,
                                np.finfo(dtype).max, np.finfo(dtype).max,
                                -np.finfo(dtype).max, 1.0], dtype)
        want, _ = run(device, desc, dy)
        for what, gather, limits in plans(device, desc):
            try:
                got, kernels = run(device, desc, dy, gather, limits)
            except ValueError:
                continue
            assert_same_bits(got, want, f"{dtype.__name__} {what} {kernels}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_one_call_cuts_and_workgroup_width_keep_the_bits(device, rng, monkeypatch, dtype):
    """The one-call function cuts a problem too large for one buffer along its identity axes,
    and PYVKGRAD_LOCAL_SIZE narrows every workgroup: neither changes a bit."""
    dy = random_array(rng, (6, 3, 24, 20), dtype)
    for mode in (NN, LIN):
        want = pyvkgrad.resample_grad(dy, (6, 3, 7, 9), interpolation_mode=mode, device=device)
        for buffer_bytes, local_size in ((None, "32"), (str(dy.nbytes // 5), None),
                                         (str(dy.nbytes // 5), "64")):
            for name, value in (("PYVKGRAD_MAX_BUFFER_BYTES", buffer_bytes),
                                ("PYVKGRAD_LOCAL_SIZE", local_size)):
                if value is None:
                    monkeypatch.delenv(name, raising=False)
                else:
                    monkeypatch.setenv(name, value)
            got = pyvkgrad.resample_grad(dy, (6, 3, 7, 9), interpolation_mode=mode,
                                         device=device)
            assert_same_bits(got, want, f"{mode} buffer {buffer_bytes} local {local_size}")


def test_windowed_plans():
    """Pure plans: the windows cover every element's terms in order, each dispatch continuing
    the last one's sums; where the loop limit allows no window at all, a clear error."""
    dt = DataType.FLOAT32
    desc = pyvkgrad.ResampleGradDesc(TensorDesc(dt, (1, 2, 512, 512)), TensorDesc(dt, (1, 2, 2, 2)),
                                     NN, (1, 1, 256, 256), (0.5,) * 4, (-0.5,) * 4)
    assert most_terms(desc) == 65536
    plan = desc.plan(Limits(max_loop_iterations=65535))
    windows = [dict(d.push) for d in plan.dispatches[:-1]]
    assert {d.kernel for d in plan.dispatches[:-1]} == {"resample_grad_gather_windowed"}
    assert plan.dispatches[-1].kernel == "resample_grad_convert"
    assert windows[0]["window_begin"] == 0 and windows[-1]["window_end"] == 65536
    assert all(a["window_end"] == b["window_begin"] for a, b in zip(windows, windows[1:]))
    assert [s.name for s in plan.scratch] == ["tables", "accumulator", "row_sums"]
    assert plan.scratch[2].nbytes == 4  # nearest keeps no row sums
    # Without a loop limit, one gather; a window asked for, the windowed gather anyway.
    assert [d.kernel for d in desc.plan(Limits()).dispatches] == ["resample_grad_gather"]
    forced = desc.plan(Limits(), gather={"window": 1000})
    assert len(forced.dispatches) == 66 + 1
    with pytest.raises(ValueError, match="window of 0 terms"):
        desc.plan(Limits(), gather={"window": 0})
    with pytest.raises(ValueError, match="not the walk's"):
        desc.plan(Limits(), gather={"window": 3, "kernel": "walk"})
    with pytest.raises(ValueError, match="expected 1 to 3 "):
        desc.plan(Limits(max_loop_iterations=loop_limit(3)), gather={"window": 4})
    # Linear keeps each element's unfinished row sum between windows.
    linear = dataclasses.replace(desc, interpolation_mode=LIN)
    plan = linear.plan(Limits(max_loop_iterations=65535))
    assert plan.dispatches[0].kernel == "resample_grad_gather_windowed"
    assert plan.scratch[2].nbytes == 4 * 8
    # Many elements per invocation: no window is short enough.
    with pytest.raises(RuntimeError, match=r"OutputGradientTensor.Sizes need fewer loop"):
        desc.plan(Limits(max_loop_iterations=80, max_workgroups=1, local_size=1))


_SCRIPT = """
import hashlib, json, sys
import numpy as np
import pyvkgrad
dev = pyvkgrad.default_device()
out = {"subgroup": dev.limits.subgroup_size, "local": dev.limits.local_size}
for dy_sizes, dx_sizes in (((3, 40), (3, 7)), ((2, 3, 12, 10), (2, 3, 6, 5)),
                           ((7, 6, 5), (3, 4, 9)), ((1, 2, 64, 48), (1, 2, 2, 3)),
                           ((1, 2, 512, 512), (1, 2, 2, 2))):
    for dtype in (np.float32, np.float16):
        dy = np.random.default_rng(7).uniform(-2, 2, dy_sizes).astype(dtype)
        for mode in ("nearest_neighbor", "linear"):
            got = pyvkgrad.resample_grad(dy, dx_sizes, interpolation_mode=mode, device=dev)
            key = f"{dy_sizes}->{dx_sizes} {np.dtype(dtype).name} {mode}"
            out[key] = hashlib.sha256(got.tobytes()).hexdigest()
json.dump(out, sys.stdout)
"""


def test_same_bits_under_other_workgroup_and_subgroup_widths(device):
    """PYVKGRAD_LOCAL_SIZE=32 and lavapipe's subgroups of 4 and 16 lanes
    (LP_NATIVE_VECTOR_WIDTH=128/512, read when the device is created: a new process) give the
    default run's bits, the walk, gather and windowed plans among them."""
    assert_same_bits_on_other_widths(device, _SCRIPT, timeout=300)
