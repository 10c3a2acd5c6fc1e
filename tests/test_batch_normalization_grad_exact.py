"""BATCH_NORMALIZATION_GRAD and BATCH_NORMALIZATION_TRAINING_GRAD bit for bit (docs/semantics.md
§17-18): the device's results against a numpy model of the kernels' arithmetic (the exact sums'
canonical chunks, tree-summed in float32 and added exactly; the short channels' sums in element
order; every later step one float32 operation, division and square root correctly rounded),
which any workgroup width, loop limit, workgroup count or layout must reproduce."""

import math

import numpy as np
import pytest

import pyvkgrad
from pyvkgrad.plan import Limits
from pyvkgrad.tensor import TensorDesc
from cases import strided_view
from test_batch_normalization_training import _exact_sum, _tree, same_bits, same_values

F32, F16 = np.float32, np.float16
DIRECT_MAX_REDUCED = 32  # the plan's: up to this many elements a channel sums in order
FUNCTIONS = {False: pyvkgrad.batch_normalization_grad,
             True: pyvkgrad.batch_normalization_training_grad}
DESCS = {False: pyvkgrad.BatchNormalizationGradDesc,
         True: pyvkgrad.BatchNormalizationTrainingGradDesc}


def _channel_sums(g, a):
    """(sum dY, sum a, sum dY a) as the plan's kernels compute them."""
    n = g.size
    if n <= DIRECT_MAX_REDUCED:
        s = np.zeros(3, F32)
        for gi, ai in zip(g, a):
            s += np.array([gi, ai, gi * ai], F32)
        return s
    padded = -(-n // 512) * 512
    gp, ap = np.zeros(padded, F32), np.zeros(padded, F32)
    gp[:n], ap[:n] = g, a
    gb, ab = gp.reshape(-1, 16, 32), ap.reshape(-1, 16, 32)
    return np.array([_exact_sum(_tree(t).reshape(-1)) for t in (gb, ab, gb * ab)], F32)


def model(x, dy, mean, var, scale, eps, training):
    """(OutputGradient, OutputScaleGradient, OutputBiasGradient), bit for bit."""
    dtype = x.dtype
    reduced = tuple(d for d in range(x.ndim) if mean.shape[d] == 1)
    kept = tuple(d for d in range(x.ndim) if d not in reduced)
    n = math.prod(x.shape[d] for d in reduced)

    def rows(t):
        return np.moveaxis(t.astype(F32), kept, range(len(kept))).reshape(-1, n)

    xr, gr = rows(x), rows(dy)
    m, v, sc = (np.moveaxis(np.broadcast_to(t, mean.shape).astype(F32), kept,
                            range(len(kept))).reshape(-1) for t in (mean, var, scale))
    dx = np.empty_like(xr)
    dscale, dbias = np.empty(len(xr), F32), np.empty(len(xr), F32)
    e, nr = F32(eps), F32(n)
    with np.errstate(all="ignore"):
        for k in range(len(xr)):
            ve = v[k] + e
            shift = m[k]
            if training and not abs(m[k] - xr[k, 0]) <= F32(8) * np.sqrt(ve):
                shift = xr[k, 0]
            s = _channel_sums(gr[k], xr[k] - shift)
            c0 = F32(1) / np.sqrt(ve)
            dbias[k] = s[0]
            centred = s[2] + (shift - m[k]) * s[0] if training else s[2]
            dscale[k] = centred * c0
            if training:
                mdy, ma = s[0] / nr, s[1] / nr
                q = (s[2] / nr - mdy * ma) / ve
                if not np.isfinite(s).all():
                    q = F32(np.nan)
                alpha = sc[k] * c0
                dx[k] = alpha * ((gr[k] - mdy) - ((xr[k] - shift) - ma) * q)
            else:
                dx[k] = gr[k] * (sc[k] / np.sqrt(ve))
    # Rows were (kept dims, reduced dims) in their orders: transpose back.
    perm = list(kept) + list(reduced)
    dxx = np.transpose(dx.reshape([x.shape[d] for d in perm]), np.argsort(perm))

    def stat(t):
        return t.reshape([mean.shape[d] for d in kept] + [1] * len(reduced)) \
            .transpose(np.argsort(perm)).reshape(mean.shape)
    return (dxx.astype(dtype), stat(dscale).astype(dtype), stat(dbias).astype(dtype))


def problem(rng, shape, stats, dtype, training, loc=0.0):
    x = (rng.standard_normal(shape) + loc).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    axes = tuple(d for d in range(len(shape)) if stats[d] == 1)
    x64 = x.astype(np.float64)
    if training:
        mean = x64.mean(axis=axes, keepdims=True).astype(dtype)
        var = x64.var(axis=axes, keepdims=True).astype(dtype)
    else:
        mean = (rng.standard_normal(stats) + loc).astype(dtype)
        var = rng.uniform(0.25, 2.0, stats).astype(dtype)
    scale = rng.standard_normal(stats).astype(dtype)
    return x, dy, mean, var, scale


SHAPES = [
    ((1,), (1,)), ((7,), (1,)), ((32,), (1,)), ((33,), (1,)), ((257,), (1,)), ((3, 5), (1, 5)),
    ((5, 3), (5, 1)), ((2, 3, 5, 7), (1, 3, 1, 1)), ((4, 16, 33, 33), (1, 16, 1, 1)),
    ((3, 4, 5, 6, 7), (1, 4, 1, 6, 1)), ((2, 2, 2, 2, 2, 2, 2, 3), (1, 2, 1, 1, 2, 1, 1, 1)),
    ((511,), (1,)), ((512,), (1,)), ((513,), (1,)), ((2, 1031), (2, 1)), ((6, 1, 3), (6, 1, 3)),
    ((4, 600), (1, 600)), ((3, 4, 172), (1, 4, 1)), ((70, 40), (1, 40)),
]


@pytest.mark.parametrize("training", [False, True], ids=["grad", "training"])
@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("shape,stats", SHAPES)
def test_matches_model(device, rng, shape, stats, dtype, training):
    args = problem(rng, shape, stats, dtype, training, loc=float(rng.uniform(-3, 3)))
    eps = float(rng.choice([0.0, 1e-5, 0.5])) if math.prod(stats) < math.prod(shape) else 1e-3
    same_bits(FUNCTIONS[training](*args, eps, device=device), model(*args, eps, training))


@pytest.mark.parametrize("training", [False, True], ids=["grad", "training"])
def test_strided_broadcast_and_nhwc(device, rng, training):
    """A strided X, a broadcast (stride 0) Scale, NHWC float16: the model's bits."""
    x, dy, mean, var, scale = problem(rng, (3, 5, 6, 7), (1, 5, 1, 1), F32, training)
    xs = strided_view(rng, x.shape, F32)
    xs[...] = x
    scale = np.broadcast_to(np.float32(1.5), (1, 5, 1, 1))
    same_bits(FUNCTIONS[training](xs, dy, mean, var, scale, 1e-5, device=device),
              model(x, dy, mean, var, np.ascontiguousarray(scale), 1e-5, training))
    args = problem(rng, (4, 9, 10, 6), (1, 1, 1, 6), F16, training)
    nhwc = [a.transpose(0, 3, 1, 2) for a in args]
    same_bits(FUNCTIONS[training](*nhwc, 1e-3, device=device),
              model(*(np.ascontiguousarray(a) for a in nhwc), 1e-3, training))


def run_desc(device, args, eps, training, limits):
    tensors = [device.upload(np.ascontiguousarray(a)) for a in args]
    x, m = tensors[0].desc, tensors[2].desc
    desc = DESCS[training](x, x, m, m, m, x, m, m, eps)
    op = device.compile(desc, limits=limits)
    outs = [device.empty(d) for d in (x, m, m)]
    for t in outs:
        t.write(np.full(t.desc.sizes, np.nan, args[0].dtype))
    names = [n for n, _ in desc.tensor_fields()]
    op(**dict(zip(names, tensors + outs)))
    got = [t.numpy() for t in outs]
    op.close()
    return got


@pytest.mark.parametrize("training", [False, True], ids=["grad", "training"])
@pytest.mark.parametrize("dtype", [F32, F16])
def test_same_bits_whatever_the_plan(device, rng, dtype, training):
    """Workgroup widths 1 to 256, loop limits that cut the sums into many dispatches, a
    workgroup count of 3: the default plan's bits, the model's."""
    for shape, stats in [((3, 5, 700), (1, 5, 1)), ((70, 40), (1, 40)), ((2, 3000), (1, 1))]:
        args = problem(rng, shape, stats, dtype, training, loc=2.0)
        want = model(*args, 1e-5, training)
        same_bits(FUNCTIONS[training](*args, 1e-5, device=device), want)
        for limits in (Limits(local_size=1, max_local_size=1), Limits(local_size=32),
                       Limits(local_size=64, max_loop_iterations=2000),
                       Limits(local_size=256, max_workgroups=3)):
            same_bits(run_desc(device, args, 1e-5, training, limits), want)


@pytest.mark.parametrize("training", [False, True], ids=["grad", "training"])
def test_non_finite_and_far_from_zero(device, rng, training):
    """A NaN in a training channel makes its dX NaN (the model's values: a NaN's payload, which
    an H200's arithmetic makes its own, lies outside the contract, docs/semantics.md §17);
    data at 1e4 (spread 1e-2): the model's bits, and the oracle's covariance."""
    args = list(problem(rng, (4, 3, 40), (1, 3, 1), F32, training))
    args[0][2, 0, 7] = np.nan
    got = FUNCTIONS[training](*args, 1e-5, device=device)
    same_values(got, model(*args, 1e-5, training), zero_signs=False)
    if training:
        assert np.isnan(got[0][:, 0]).all() and np.isfinite(got[0][:, 1:]).all()
    args = problem(rng, (64, 4, 300), (1, 4, 1), F32, training, loc=1e4)
    same_bits(FUNCTIONS[training](*args, 0.0, device=device), model(*args, 0.0, training))


# (shape, the packed dX pass's SAME and RUN at each type's vector: float32 4, float16 8)
VECTOR_CASES = [
    ((4, 6, 7, 7), None, {F32: (False, 49), F16: (False, 49)}),  # two channels a vector
    ((8, 6, 5), None, {F32: (False, 5), F16: (False, 0)}),  # float16: 8 > 5, one an element
    ((4, 6, 9), None, {F32: (False, 9), F16: (False, 9)}),
    ((4, 6, 12), None, {F32: (True, 12), F16: (False, 12)}),
    ((3, 6, 16), None, {F32: (True, 16), F16: (True, 16)}),  # a vector in one channel
    ((5, 5, 7), None, {F32: (False, 7), F16: (False, 0)}),  # 175 elements: a tail vector
    # channels over axes 0 and 2: the channel index steps back after every 4 runs
    ((2, 5, 4, 9), (2, 1, 4, 1), {F32: (False, 9), F16: (False, 9)}),
    ((4, 2, 2, 5, 7), (1, 2, 2, 1, 1), {F32: (False, 35), F16: (False, 35)}),  # rank 5
]


@pytest.mark.parametrize("training", [False, True], ids=["grad", "training"])
@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("shape,stats,vector", VECTOR_CASES)
def test_vectors_across_channels(device, rng, shape, stats, vector, dtype, training):
    """The packed dX pass's vectors: in one channel (SAME), in two at most (RUN: the first
    element's and the last's coefficients, read once each), or a channel per element; the
    model's bits on each, and the road the plan takes. (BATCH_NORMALIZATION_GRAD's float32
    dX is written by the sums kernel: no dX pass.)"""
    stats = stats or (1, shape[1]) + (1,) * (len(shape) - 2)
    args = problem(rng, shape, stats, dtype, training, loc=1.0)
    data_type = pyvkgrad.DataType.from_numpy(dtype, "test", "dtype")
    x, m = (TensorDesc(data_type, s) for s in (shape, stats))
    plan = DESCS[training](x, x, m, m, m, x, m, m, 1e-5).plan(device.limits)
    passes = [dict(d.constants) for d in plan.dispatches
              if d.kernel == "batch_normalization_training_grad_output_packed"]
    assert [(c["SAME"], c["RUN"]) for c in passes] == ([] if dtype == F32 and not training
                                                       else [vector[dtype]])
    same_bits(FUNCTIONS[training](*args, 1e-5, device=device), model(*args, 1e-5, training))


@pytest.mark.parametrize("training", [False, True], ids=["grad", "training"])
def test_partials_no_larger_than_the_input(training):
    """Short channels, side by side or over a narrow workgroup: the exact sums' scratch buffer
    stays no larger than X, so a problem the one-call function cuts to fit a buffer limit
    fits with its scratch (a 35-element NHWC channel once took 2 groups of 312 bytes)."""
    for sizes, stats in [((5, 7, 4, 3), (1, 1, 4, 3)), ((40, 3), (1, 3)), ((2, 600), (1, 600)),
                         ((33,), (1,)), ((3, 5, 700), (1, 5, 1))]:
        x = TensorDesc(pyvkgrad.DataType.FLOAT16, sizes)
        m = TensorDesc(pyvkgrad.DataType.FLOAT16, stats)
        for width in (1, 16, 256):
            plan = DESCS[training](x, x, m, m, m, x, m, m, 1e-5).plan(
                Limits(local_size=width, max_local_size=width))
            partials = {s.name: s.nbytes for s in plan.scratch}.get("partials", 0)
            assert partials <= x.total_tensor_size_in_bytes, (sizes, width, partials)
