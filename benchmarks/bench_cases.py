"""The benchmark's cases (benchmarks/run.py): per operator of the table its problems
(shapes, data types, the bytes they move at least, PyTorch's equivalent), and the groups
overhead, chain and roundtrip.

A case's builder `build(dev, rng)` returns (op, tensors, bytes, torch_fn); with dev None it
makes the inputs and PyTorch's side only (op and tensors None): PyTorch is timed in a process
of its own (run.py), which never touches the Vulkan device."""

from __future__ import annotations

import importlib.util
import statistics

import numpy as np

import pyvkgrad
from pyvkgrad import DataType, TensorDesc
from pyvkgrad.ops._elementwise import ElementwiseGradDesc

from bench_timing import (MiB, median_wall_ns, progress, replay_walls_ns, timed_replays,
                          vulkan_time, wait_strategy)


def _np(dt):
    return np.float32 if dt == "float32" else np.float16


def _dt(dt):
    return DataType.FLOAT32 if dt == "float32" else DataType.FLOAT16


def elementwise_cases(record):
    """Cases of an element-wise operator (any on the element-wise base): one tensor size per
    line, packed, both data types."""
    def cases(quick):
        sizes = [16 * MiB, 64 * MiB] if quick else [16 * MiB, 64 * MiB, 256 * MiB, 1024 * MiB]
        for dt in ("float32", "float16"):
            for nbytes in sizes:
                n = nbytes // np.dtype(_np(dt)).itemsize
                yield (record.OPERATOR, f"{nbytes // MiB} MiB per tensor ({n} elements)", dt,
                       lambda dev, rng, dt=dt, n=n: _elementwise(dev, rng, record, dt, n))
    return cases


# PyTorch's equivalent of an element-wise operator, where it has one: (torch, x, dy) -> call.
TORCH_ELEMENTWISE = {
    "activation_relu_grad": lambda torch, tx, tdy: lambda: torch.ops.aten.threshold_backward(
        tdy, tx, 0),
    "element_wise_clip_grad": lambda torch, tx, tdy: lambda: torch.ops.aten.hardtanh_backward(
        tdy, tx, 0.0, 6.0),
}
TORCH_ELEMENTWISE["element_wise_clip_grad1"] = TORCH_ELEMENTWISE["element_wise_clip_grad"]

# The scalar parameters of an element-wise operator's cases, by data type (relu6's bounds for
# the clip grads: about half the standard normal X pass), where it has any.
ELEMENTWISE_PARAMETERS = {
    "element_wise_clip_grad": lambda data_type: dict(min=0.0, max=6.0),
    "element_wise_clip_grad1": lambda data_type: dict(min_max_data_type=data_type, min=0, max=6),
}


def _elementwise(dev, rng, record, dt, n):
    desc = TensorDesc(_dt(dt), (n,))
    x = rng.standard_normal(n, dtype=np.float32).astype(_np(dt))
    dy = rng.standard_normal(n, dtype=np.float32).astype(_np(dt))
    torch_fn = None
    if record.name in TORCH_ELEMENTWISE:
        def torch_fn(T):
            return TORCH_ELEMENTWISE[record.name](T.torch, T.tensor(x), T.tensor(dy))
    if dev is None:
        return None, None, 3 * x.nbytes, torch_fn
    parameters = ELEMENTWISE_PARAMETERS.get(record.name, lambda data_type: {})(_dt(dt))
    op = dev.compile(record.descriptor(desc, desc, desc, **parameters))
    tensors = dict(input_tensor=dev.upload(x), input_gradient_tensor=dev.upload(dy),
                   output_gradient_tensor=dev.empty(desc))
    return op, tensors, 3 * x.nbytes, torch_fn


def resample_shapes(quick):
    """(n, c, h, w, ratio, nhwc) of dX: NCHW at 2x, 80 -> 48, 1.5x and 3x, and one NHWC
    (channels innermost in memory) case."""
    n, c = (4, 16) if quick else (32, 64)
    return [(n, c, 64, 64, 2.0, False), (n, c, 48, 48, 80 / 48, False),
            (n, c, 64, 64, 1.5, False), (n, c, 32, 32, 3.0, False), (n, c, 64, 64, 2.0, True)]


def resample_cases(quick, rounding=None):
    """The ResampleGrad cases on resample_shapes: both modes, gather and atomic, both types.
    With a `rounding` direction, RESAMPLE_GRAD1's: nearest with offsets 0 / 0 (PyTorch's
    nearest), the gather only (its tables and kernels are RESAMPLE_GRAD's)."""
    modes, algorithms = ((("nearest_neighbor",), ("gather",)) if rounding else
                         (("nearest_neighbor", "linear"), ("gather", "atomic")))
    for n, c, h, w, ratio, nhwc in resample_shapes(quick):
        for mode in modes:
            for algorithm in algorithms:
                if algorithm == "atomic" and (nhwc or ratio not in (2.0, 80 / 48)):
                    continue  # the atomic path is measured on the NCHW 2x and 80 -> 48 cases
                for dt in ("float32", "float16"):
                    oh, ow = round(h * ratio), round(w * ratio)
                    layout = " NHWC" if nhwc else ""
                    yield ("RESAMPLE_GRAD1" if rounding else "RESAMPLE_GRAD",
                           f"{'nearest ' + rounding if rounding else mode} {algorithm} "
                           f"[{n},{c},{oh},{ow}] -> [{n},{c},{h},{w}]{layout}",
                           dt, lambda dev, rng, a=(n, c, h, w, oh, ow, mode, algorithm, dt, nhwc,
                                                   rounding): _resample(dev, rng, *a))


def _nhwc(sizes):
    """Element strides of an NCHW-indexed tensor laid out NHWC (channels innermost)."""
    n, c, h, w = sizes
    return (h * w * c, 1, w * c, c)


def _resample(dev, rng, n, c, h, w, oh, ow, mode, algorithm, dt, nhwc=False, rounding=None):
    dy_desc = TensorDesc(_dt(dt), (n, c, oh, ow), _nhwc((n, c, oh, ow)) if nhwc else None)
    dx_desc = TensorDesc(_dt(dt), (n, c, h, w), _nhwc((n, c, h, w)) if nhwc else None)
    scales = (1.0, 1.0, oh / h, ow / w)
    if rounding:  # RESAMPLE_GRAD1 with offsets 0 / 0
        desc = pyvkgrad.ResampleGrad1Desc(dy_desc, dx_desc, mode, rounding, scales, (0.0,) * 4,
                                          (0.0,) * 4, algorithm=algorithm)
    else:
        desc = pyvkgrad.ResampleGradDesc(dy_desc, dx_desc, mode, scales, (0.5,) * 4,
                                         (-0.5,) * 4, algorithm=algorithm)
    dy = rng.standard_normal(dy_desc.sizes, dtype=np.float32).astype(_np(dt))
    if nhwc:  # the same logical values, channels innermost in memory
        dy = np.ascontiguousarray(dy.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    op = tensors = None
    if dev is not None:
        op = dev.compile(desc)
        tensors = dict(input_gradient_tensor=dev.upload(dy),
                       output_gradient_tensor=dev.empty(dx_desc))
        assert tensors["input_gradient_tensor"].desc == dy_desc

    def torch_fn(T):
        tdy = T.tensor(dy)
        if nhwc:
            tdy = tdy.contiguous(memory_format=T.torch.channels_last)
        aten = T.torch.ops.aten
        if mode == "linear":  # half-pixel bilinear == align_corners=False
            return lambda: aten.upsample_bilinear2d_backward(tdy, [oh, ow], [n, c, h, w], False)
        if rounding:  # DECREASING with offsets 0 / 0 is PyTorch's nearest.
            return lambda: aten.upsample_nearest2d_backward(tdy, [oh, ow], [n, c, h, w])
        # DirectML's round-half-up nearest with half-pixel offsets is PyTorch's nearest-exact.
        return lambda: aten._upsample_nearest_exact2d_backward(tdy, [oh, ow], [n, c, h, w])
    return op, tensors, dy.nbytes + n * c * h * w * dy.itemsize, torch_fn


def bn_cases(training):
    def cases(quick):
        # [256,512,7,7]: rows of 49 elements, a short run for the sums to walk.
        shapes = [(4, 64, 56, 56), (32, 256, 14, 14)] if quick else [(32, 64, 112, 112),
                                                                     (256, 256, 14, 14),
                                                                     (256, 512, 7, 7)]
        name = "BATCH_NORMALIZATION_TRAINING_GRAD" if training else "BATCH_NORMALIZATION_GRAD"
        for shape in shapes:
            for dt in ("float32", "float16"):
                yield (name, f"{list(shape)} per channel", dt,
                       lambda dev, rng, s=shape, dt=dt: _bn(dev, rng, s, training, dt))
    return cases


def random_generator_cases(quick):
    """RANDOM_GENERATOR: uint32 outputs of 16 MiB to 1 GiB, measured against a fill of the
    same bytes (a write-only kernel: it reads six state words)."""
    sizes = [16 * MiB, 64 * MiB] if quick else [16 * MiB, 64 * MiB, 256 * MiB, 1024 * MiB]
    for nbytes in sizes:
        n = nbytes // 4
        yield ("RANDOM_GENERATOR", f"{nbytes // MiB} MiB output ({n} words)", "uint32",
               lambda dev, rng, n=n: _random_generator(dev, rng, n))


def _random_generator(dev, rng, n):
    u32 = DataType.UINT32

    def torch_fn(T):  # PyTorch's own Philox (CUDA) filling as many 32-bit words
        t = T.torch.empty(n, dtype=T.torch.int32, device=T.device)
        return lambda: t.random_()
    if dev is None:  # PyTorch's side, in its own process
        return None, None, 4 * n, torch_fn, "write"
    state = TensorDesc(u32, (1, 1, 1, 6))
    op = dev.compile(pyvkgrad.RandomGeneratorDesc(state, TensorDesc(u32, (n,)), state))
    s = dev.upload(rng.integers(0, 2**32, (1, 1, 1, 6), dtype=np.uint64).astype(np.uint32))
    tensors = dict(input_state_tensor=s, output_tensor=dev.empty(TensorDesc(u32, (n,))),
                   output_state_tensor=s)  # in place, as ONNX Runtime binds it
    return op, tensors, 4 * n, torch_fn, "write"


def bn_training_cases(quick):
    """BATCH_NORMALIZATION_TRAINING on the BatchNorm grads' shapes, against PyTorch's CUDA
    training-mode batch_norm forward (native_batch_norm, no running statistics)."""
    shapes = [(4, 64, 56, 56), (32, 256, 14, 14)] if quick else [(32, 64, 112, 112),
                                                                 (256, 256, 14, 14),
                                                                 (256, 512, 7, 7)]
    for shape in shapes:
        for dt in ("float32", "float16"):
            yield ("BATCH_NORMALIZATION_TRAINING", f"{list(shape)} per channel", dt,
                   lambda dev, rng, s=shape, dt=dt: _bn_training(dev, rng, s, dt))


def _bn_training(dev, rng, shape, dt):
    c = shape[1]
    x = (rng.standard_normal(shape, dtype=np.float32) + 0.5).astype(_np(dt))
    scale = rng.standard_normal((1, c, 1, 1)).astype(_np(dt))
    bias = rng.standard_normal((1, c, 1, 1)).astype(_np(dt))
    big, small = TensorDesc(_dt(dt), shape), TensorDesc(_dt(dt), (1, c, 1, 1))
    op = tensors = None
    if dev is not None:
        op = dev.compile(pyvkgrad.BatchNormalizationTrainingDesc(big, small, small, None, big,
                                                                 small, small, 1e-5))
        tensors = dict(input_tensor=dev.upload(x), scale_tensor=dev.upload(scale),
                       bias_tensor=dev.upload(bias), output_tensor=dev.empty(big),
                       output_mean_tensor=dev.empty(small),
                       output_variance_tensor=dev.empty(small))

    def torch_fn(T):
        tx, w_, b_ = T.tensor(x), T.tensor(scale.reshape(c)), T.tensor(bias.reshape(c))
        if T.cuda and dt == "float16":  # PyTorch keeps BatchNorm's parameters in float32
            w_, b_ = w_.float(), b_.float()
        return lambda: T.torch.native_batch_norm(tx, w_, b_, None, None, True, 0.1, 1e-5)
    # Minimum traffic: X read once, Output written once (the statistics are negligible).
    return op, tensors, 2 * x.nbytes, torch_fn


def adam_cases(quick):
    """ADAM_OPTIMIZER in place (parameters and moments over themselves), 16 and 256 MiB per
    tensor: 4 tensors read and 3 written, against PyTorch's fused CUDA Adam on the same bytes."""
    sizes = [16 * MiB] if quick else [16 * MiB, 256 * MiB]
    for nbytes in sizes:
        for dt in ("float32", "float16"):
            n = nbytes // np.dtype(_np(dt)).itemsize
            yield ("ADAM_OPTIMIZER", f"{nbytes // MiB} MiB per tensor, in place", dt,
                   lambda dev, rng, n=n, dt=dt: _adam(dev, rng, n, dt))


def adam_data(rng, n, dt):
    """The Adam case's (x, m, v, g) of n elements of dt: standard normal x, m and g, v = |g|."""
    x, m, g = (rng.standard_normal(n, dtype=np.float32).astype(_np(dt)) for _ in range(3))
    return x, m, np.abs(g).astype(_np(dt)), g


def adam_sweep(quick_float32_elements=None):
    """The Adam investigations' cases: (data type, (x, m, v, g)) for 16 and 256 MiB per tensor
    (or quick_float32_elements' bytes), float32 then float16, as run.py's data."""
    sizes = [quick_float32_elements] if quick_float32_elements else [4 << 20, 64 << 20]
    for n32 in sizes:
        for dt in ("float32", "float16"):
            yield dt, adam_data(np.random.default_rng(1), n32 * 4 // _np(dt)().itemsize, dt)


def adam_operator(dev, x, m, v, g, dt):
    """(compiled ADAM_OPTIMIZER, its tensors) for the Adam case's data uploaded to `dev`, the
    outputs bound over the inputs (step 1, lr 1e-3, Betas 0.9 and 0.999, Epsilon 1e-8)."""
    desc = TensorDesc(_dt(dt), (x.size,))
    t = dev.upload(np.array([1], np.uint32))
    tensors = dict(input_parameters_tensor=dev.upload(x), input_first_moment_tensor=dev.upload(m),
                   input_second_moment_tensor=dev.upload(v), gradient_tensor=dev.upload(g),
                   training_step_tensor=t)
    tensors.update(output_parameters_tensor=tensors["input_parameters_tensor"],
                   output_first_moment_tensor=tensors["input_first_moment_tensor"],
                   output_second_moment_tensor=tensors["input_second_moment_tensor"])
    op = dev.compile(pyvkgrad.AdamOptimizerDesc(desc, desc, desc, desc, t.desc, desc, desc, desc,
                                                1e-3, 0.9, 0.999, 1e-8))
    return op, tensors


def _adam(dev, rng, n, dt):
    x, m, v, g = adam_data(rng, n, dt)

    def torch_fn(T):  # torch.optim.Adam(fused=True)'s kernel, one step
        p, mt, vt, gt = (T.tensor(a) for a in (x, m, v, g))
        step = T.torch.tensor(1.0, device=T.device)
        return lambda: T.torch._fused_adam_([p], [gt], [mt], [vt], [], [step], lr=1e-3,
                                            beta1=0.9, beta2=0.999, weight_decay=0.0,
                                            eps=1e-8, amsgrad=False, maximize=False)
    if dev is None:
        return None, None, 7 * x.nbytes, torch_fn
    op, tensors = adam_operator(dev, x, m, v, g, dt)
    return op, tensors, 7 * x.nbytes, torch_fn


def pooling_cases(kind):
    """AVERAGE_POOLING_GRAD (kind "avg") or MAX_POOLING_GRAD ("max"): the common 2x2 stride-2
    (no padding) and 3x3 stride-2 (padding 1, ResNet's stem) poolings on [32,64,112,112] and
    [64,128,56,56], float32 and float16, beside PyTorch's avg_pool2d_backward /
    max_pool2d_with_indices_backward. Minimum traffic: dY read and dX written (and X read, max)."""
    operator = "AVERAGE_POOLING_GRAD" if kind == "avg" else "MAX_POOLING_GRAD"

    def cases(quick):
        shapes = [(8, 64, 56, 56)] if quick else [(32, 64, 112, 112), (64, 128, 56, 56)]
        for shape in shapes:
            for window, padding in ((2, 0), (3, 1)):
                for dt in ("float32", "float16"):
                    yield (operator, f"{list(shape)} {window}x{window} stride 2 padding "
                           f"{padding}", dt,
                           lambda dev, rng, shape=shape, w=window, p=padding, dt=dt:
                           _pooling(dev, rng, kind, shape, w, p, dt))
    return cases


def _pooling(dev, rng, kind, shape, window, padding, dt):
    n, c, h, w = shape
    out = tuple((s + 2 * padding - window) // 2 + 1 for s in (h, w))
    x = rng.standard_normal(shape, dtype=np.float32).astype(_np(dt))
    dy = rng.standard_normal((n, c) + out, dtype=np.float32).astype(_np(dt))
    geometry = ((2, 2), (window, window), (padding, padding), (padding, padding))
    nbytes = x.nbytes + dy.nbytes + (x.nbytes if kind == "max" else 0)

    def torch_fn(T):
        torch = T.torch
        tx, tdy = T.tensor(x), T.tensor(dy)
        if kind == "avg":
            return lambda: torch.ops.aten.avg_pool2d_backward(
                tdy, tx, [window] * 2, [2, 2], [padding] * 2, False, True, None)
        _, indices = torch.nn.functional.max_pool2d(tx, window, 2, padding, return_indices=True)
        return lambda: torch.ops.aten.max_pool2d_with_indices_backward(
            tdy, tx, [window] * 2, [2, 2], [padding] * 2, [1, 1], False, indices)
    if dev is None:
        return None, None, nbytes, torch_fn
    xd, dyd = TensorDesc(_dt(dt), shape), TensorDesc(_dt(dt), dy.shape)
    tensors = dict(input_gradient_tensor=dev.upload(dy), output_gradient_tensor=dev.empty(xd))
    if kind == "avg":
        op = dev.compile(pyvkgrad.AveragePoolingGradDesc(dyd, xd, *geometry, True))
    else:
        op = dev.compile(pyvkgrad.MaxPoolingGradDesc(xd, dyd, xd, *geometry, (1, 1)))
        tensors["input_tensor"] = dev.upload(x)
    return op, tensors, nbytes, torch_fn
def roi_align_cases(quick):
    """ROI_ALIGN_GRAD (the issue's shape): 512 regions over [2, 256, 50, 50] to 7x7 outputs,
    bilinear averaging with ROI_ALIGN's sampling (about 2 samples a side), both data types;
    against torchvision's CUDA roi_align backward where torchvision is installed; and dX with
    dROI (torchvision has no box gradient)."""
    shapes = [(1, 16, 50, 50, 64)] if quick else [(2, 256, 50, 50, 512)]
    for b, c, h, w, regions in shapes:
        for droi in (False, True):
            for dt in ("float32", "float16"):
                yield ("ROI_ALIGN_GRAD", f"{regions} regions over {[b, c, h, w]} -> 7x7"
                       + (" + dROI" if droi else ""), dt,
                       lambda dev, rng, s=(b, c, h, w), r=regions, dt=dt, d=droi:
                       _roi_align(dev, rng, s, r, dt, d))


def _roi_align(dev, rng, sizes, regions, dt, droi=False):
    b, c, h, w = sizes
    x1y1 = rng.uniform(0, 0.8, (regions, 2)) * (w, h)
    roi = np.concatenate([x1y1, x1y1 + rng.uniform(4, 16, (regions, 2))], 1).astype(_np(dt))
    batch = rng.integers(0, b, regions).astype(np.uint32)
    dy = rng.standard_normal((regions, c, 7, 7), dtype=np.float32).astype(_np(dt))
    # dY and dX once each, the regions and indices: the least a gather moves (with dROI, X
    # once and dROI too).
    nbytes = dy.nbytes + b * c * h * w * dy.itemsize * (2 if droi else 1) + roi.nbytes * (
        2 if droi else 1) + batch.nbytes
    torch_fn = None
    # Looked up, not imported: torchvision imports torch, which the timing process must not
    # hold (run.py times pyvkgrad without torch unless --cuda-first).
    if importlib.util.find_spec("torchvision") is not None:
        def torch_fn(T):  # torchvision's roi_align backward (aligned=False, sampling_ratio 0)
            import torchvision  # noqa: F401  (registers torch.ops.torchvision)
            boxes = T.tensor(np.concatenate([batch[:, None], roi], 1).astype(_np(dt)))
            grad = T.tensor(dy)
            return lambda: T.torch.ops.torchvision._roi_align_backward(
                grad, boxes, 1.0, 7, 7, b, c, h, w, 0, False)
    if droi:
        torch_fn = None  # torchvision's roi_align has no box gradient
    if dev is None:
        return None, None, nbytes, torch_fn
    x = TensorDesc(_dt(dt), sizes) if droi else None
    desc = pyvkgrad.RoiAlignGradDesc(
        x, TensorDesc(_dt(dt), dy.shape), TensorDesc(_dt(dt), roi.shape),
        TensorDesc(DataType.UINT32, batch.shape), TensorDesc(_dt(dt), sizes),
        TensorDesc(_dt(dt), roi.shape) if droi else None, input_pixel_offset=0.0)
    tensors = dict(input_gradient_tensor=dev.upload(dy), roi_tensor=dev.upload(roi),
                   batch_indices_tensor=dev.upload(batch),
                   output_gradient_tensor=dev.empty(TensorDesc(_dt(dt), sizes)))
    if droi:
        tensors["input_tensor"] = dev.upload(
            rng.standard_normal(sizes, dtype=np.float32).astype(_np(dt)))
        tensors["output_roi_gradient_tensor"] = dev.empty(TensorDesc(_dt(dt), roi.shape))
    return dev.compile(desc), tensors, nbytes, torch_fn
def slice_grad_cases(quick):
    """SLICE_GRAD: a [.., 112, 112] window at offset 8 of [.., 128, 128] (a crop), and every
    other row and column of it (stride 2), float32 and float16, against PyTorch's autograd of
    the same slicing (slice_backward along H, then W); bytes: dY read and dX written once."""
    n = 8 if quick else 32
    for name, step in (("crop", 1), ("stride 2", 2)):
        for dt in ("float32", "float16"):
            yield ("SLICE_GRAD", f"[{n}, 64, 128, 128] {name}: window offset 8, size 112", dt,
                   lambda dev, rng, dt=dt, step=step: _slice_grad(dev, rng, n, step, dt))


def _slice_grad(dev, rng, n, step, dt):
    full, m = (n, 64, 128, 128), -(-112 // step)
    dy = rng.standard_normal((n, 64, m, m), dtype=np.float32).astype(_np(dt))

    def torch_fn(T):
        aten, tdy = T.torch.ops.aten, T.tensor(dy)
        return lambda: aten.slice_backward(aten.slice_backward(tdy, (n, 64, m, 128), 3, 8, 120,
                                                                step), full, 2, 8, 120, step)
    nbytes = dy.nbytes + int(np.prod(full)) * dy.itemsize
    if dev is None:
        return None, None, nbytes, torch_fn
    dx = TensorDesc(_dt(dt), full)
    op = dev.compile(pyvkgrad.SliceGradDesc(TensorDesc(_dt(dt), dy.shape), dx, (0, 0, 8, 8),
                                            (n, 64, 112, 112), (1, 1, step, step)))
    return op, dict(input_gradient_tensor=dev.upload(dy),
                    output_gradient_tensor=dev.empty(dx)), nbytes, torch_fn


def lrn_cases(quick):
    """LOCAL_RESPONSE_NORMALIZATION_GRAD across channels, size 5 (AlexNet's), on [32, 64, 56,
    56] ([8, ...] quick), float32 and float16, against PyTorch's autograd of
    F.local_response_norm; bytes: X and dY read and dX written once."""
    n = 8 if quick else 32
    for dt in ("float32", "float16"):
        yield ("LOCAL_RESPONSE_NORMALIZATION_GRAD", f"[{n}, 64, 56, 56] across C, size 5", dt,
               lambda dev, rng, dt=dt: _lrn(dev, rng, (n, 64, 56, 56), dt))


def _lrn(dev, rng, shape, dt):
    x = rng.standard_normal(shape, dtype=np.float32).astype(_np(dt))
    dy = rng.standard_normal(shape, dtype=np.float32).astype(_np(dt))
    parameters = (True, 5, 1e-4, 0.75, 2.0)

    def torch_fn(T):  # PyTorch's own backward graph of the forward, run again
        tx = T.tensor(x).requires_grad_()
        y = T.torch.nn.functional.local_response_norm(tx, 5, 1e-4, 0.75, 2.0)
        tdy = T.tensor(dy)
        return lambda: T.torch.autograd.grad(y, tx, tdy, retain_graph=True)
    if dev is None:
        return None, None, 3 * x.nbytes, torch_fn
    desc = TensorDesc(_dt(dt), shape)
    op = dev.compile(pyvkgrad.LocalResponseNormalizationGradDesc(desc, desc, desc, *parameters))
    return op, dict(input_tensor=dev.upload(x), input_gradient_tensor=dev.upload(dy),
                    output_gradient_tensor=dev.empty(desc)), 3 * x.nbytes, torch_fn


def benchmark_cases(record):
    """The benchmark's cases of an operator of the table: shapes from its issue; any
    element-wise operator gets the element-wise cases."""
    special = {"resample_grad": resample_cases,
               "resample_grad1": lambda quick: resample_cases(quick, "decreasing"),
               "random_generator": random_generator_cases, "adam_optimizer": adam_cases,
               "batch_normalization_grad": bn_cases(False),
               "batch_normalization_training_grad": bn_cases(True),
               "batch_normalization_training": bn_training_cases,
               "average_pooling_grad": pooling_cases("avg"),
               "max_pooling_grad": pooling_cases("max"),
               "roi_align_grad": roi_align_cases,
               "slice_grad": slice_grad_cases,
               "local_response_normalization_grad": lrn_cases}
    if record.name in special:
        return special[record.name]
    if issubclass(record.descriptor, ElementwiseGradDesc):
        return elementwise_cases(record)
    raise SystemExit(f"benchmarks/bench_cases.py: no benchmark cases for {record.name}: add them")


# Short names kept from before the table: --ops relu,resample,bn.
ALIASES = {"relu": ["activation_relu_grad"], "resample": ["resample_grad"],
           "bn": ["batch_normalization_grad", "batch_normalization_training_grad"]}
GROUPS = ("overhead", "chain", "roundtrip")


def _bn(dev, rng, shape, training, dt, limits=None):
    n, c, h, w = shape
    x = rng.standard_normal(shape, dtype=np.float32).astype(_np(dt))
    dy = rng.standard_normal(shape, dtype=np.float32).astype(_np(dt))
    mean = x.astype(np.float32).mean(axis=(0, 2, 3), keepdims=True).astype(_np(dt))
    var = x.astype(np.float32).var(axis=(0, 2, 3), keepdims=True).astype(_np(dt))
    scale = rng.standard_normal((1, c, 1, 1)).astype(_np(dt))
    big, small = TensorDesc(_dt(dt), shape), TensorDesc(_dt(dt), (1, c, 1, 1))
    cls = (pyvkgrad.BatchNormalizationTrainingGradDesc if training
           else pyvkgrad.BatchNormalizationGradDesc)
    op = tensors = None
    if dev is not None:
        op = dev.compile(cls(big, big, small, small, small, big, small, small, 1e-5), limits)
        tensors = dict(input_tensor=dev.upload(x), input_gradient_tensor=dev.upload(dy),
                       mean_tensor=dev.upload(mean), variance_tensor=dev.upload(var),
                       scale_tensor=dev.upload(scale), output_gradient_tensor=dev.empty(big),
                       output_scale_gradient_tensor=dev.empty(small),
                       output_bias_gradient_tensor=dev.empty(small))
    # Minimum traffic: X and dY read once, dX written once (the statistics are negligible).
    nbytes = 3 * x.nbytes

    def torch_fn(T):
        torch = T.torch
        tx, tdy = T.tensor(x), T.tensor(dy)
        w_ = T.tensor(scale.reshape(c))
        m_, v_ = T.tensor(mean.reshape(c)), T.tensor(var.reshape(c))
        if T.cuda and dt == "float16":  # PyTorch keeps BatchNorm statistics in float32
            m_, v_, w_ = m_.float(), v_.float(), w_.float()
        invstd = torch.rsqrt(v_.float() + 1e-5)
        mask = [True, True, True]
        if training:
            return lambda: torch.ops.aten.native_batch_norm_backward(
                tdy, tx, w_, None, None, m_.float(), invstd, True, 1e-5, mask)
        return lambda: torch.ops.aten.native_batch_norm_backward(
            tdy, tx, w_, m_, v_, None, None, False, 1e-5, mask)
    return op, tensors, nbytes, torch_fn

# ---- numpy round trips -------------------------------------------------------------------------

def roundtrip_cases(dev, T, quick):
    """What a numpy user waits for: (name, pyvkgrad's one-call function, PyTorch doing the same
    from numpy: from_numpy -> device -> op -> .cpu().numpy(), synchronised). dev or T may be
    None: each side is timed in its own process (roundtrip)."""
    rng = np.random.default_rng(3)
    cases = []
    for n in ((1024, 1 << 20) if quick else (1024, 1 << 20, 16 << 20)):
        x = rng.standard_normal(n).astype(np.float32)
        dy = rng.standard_normal(n).astype(np.float32)
        cases.append((f"ReLU grad {n} float32",
                      lambda x=x, dy=dy: pyvkgrad.activation_relu_grad(x, dy, device=dev),
                      lambda x=x, dy=dy: T.torch.ops.aten.threshold_backward(
                          T.tensor(dy), T.tensor(x), 0).cpu().numpy()))
    shape = (4, 64, 28, 28) if quick else (32, 64, 56, 56)
    x = rng.standard_normal(shape).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    mean, var = x.mean(axis=(0, 2, 3), keepdims=True), x.var(axis=(0, 2, 3), keepdims=True)
    scale = np.ones_like(mean)

    def torch_bn():
        torch = T.torch
        out = torch.ops.aten.native_batch_norm_backward(
            T.tensor(dy), T.tensor(x), T.tensor(scale.ravel()), None, None,
            T.tensor(mean.ravel()), torch.rsqrt(T.tensor(var.ravel()) + 1e-5), True, 1e-5,
            [True, True, True])
        return [o.cpu().numpy() for o in out]
    cases.append((f"BN training grad {list(shape)} float32",
                  lambda: pyvkgrad.batch_normalization_training_grad(x, dy, mean, var, scale, 1e-5,
                                                                     device=dev),
                  torch_bn))
    return cases


def roundtrip(dev, T, quick, repeat):
    """Median wall microseconds of each round trip (roundtrip_cases) on one side: pyvkgrad's
    ({"case", "pyvkgrad_us"}) when dev is given, else PyTorch's ({"case",
    "torch_from_numpy_us"}; T.sync() inside the timing)."""
    rows = []
    for name, ours, theirs in roundtrip_cases(dev, T, quick):
        if dev is not None:
            row = {"case": name, "pyvkgrad_us": median_wall_ns(ours, repeat, dev) / 1e3}
        else:
            row = {"case": name,
                   "torch_from_numpy_us": median_wall_ns(lambda: (theirs(), T.sync()),
                                                         repeat) / 1e3}
        rows.append(row)
        progress(f"    {row}")
    return rows


# ---- host overhead and chain -------------------------------------------------------------------

def overhead_calls(dev, n=1024):
    """The calls host_overhead times, on an n-element float32 ReLU grad: {name: fn}, the
    one-call function, the compiled operator, a recording's replay and a replay of a recording
    of ten (investigations/host_overhead.py times their parts too)."""
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    desc = TensorDesc(DataType.FLOAT32, (n,))
    op = dev.compile(pyvkgrad.ActivationReluGradDesc(desc, desc, desc))
    ts = dict(input_tensor=dev.upload(x), input_gradient_tensor=dev.upload(x),
              output_gradient_tensor=dev.empty(desc))
    with dev.record() as rec:
        rec.execute(op, **ts)
    with dev.record() as rec10:
        for _ in range(10):
            rec10.execute(op, **ts)
    return {"one_call_function_us": lambda: pyvkgrad.activation_relu_grad(x, x, device=dev),
            "compiled_operator_us": lambda: op(**ts),
            "recording_replay_us": rec.replay,
            "recording_of_10_replay_us": rec10.replay}


def host_overhead(dev, repeat):
    """Median microseconds per call on a 1024-element ReLU grad (overhead_calls), each call
    timed on its own, and the wait strategy they ran with."""
    out = {name: median_wall_ns(fn, repeat, dev) / 1e3 for name, fn in overhead_calls(dev).items()}
    out["statistic"] = f"median of {repeat} calls"
    out["wait"] = wait_strategy(dev)
    return out

def tiny_recording(dev):
    """A recorded ReLU grad over 4 elements: a submission with next to no GPU work."""
    desc = TensorDesc(DataType.FLOAT32, (4,))
    op = dev.compile(pyvkgrad.ActivationReluGradDesc(desc, desc, desc))
    ones = dev.upload(np.ones(4, np.float32))
    with dev.record() as rec:
        rec.execute(op, input_tensor=ones, input_gradient_tensor=ones,
                    output_gradient_tensor=dev.empty(desc))
    return rec


def chain(dev, quick, repeat):
    """ResampleGrad -> BatchNorm training grad -> ReLU grad, each reading the previous output,
    as one recording; compared with the sum of the three kernel times plus one submission."""
    rng = np.random.default_rng(2)
    n, c, h, w = (4, 32, 32, 32) if quick else (32, 64, 64, 64)
    f32 = DataType.FLOAT32
    big, up, small = (TensorDesc(f32, (n, c, h, w)), TensorDesc(f32, (n, c, 2 * h, 2 * w)),
                      TensorDesc(f32, (1, c, 1, 1)))
    rs = dev.compile(pyvkgrad.ResampleGradDesc(up, big, "linear", (1, 1, 2, 2), (0.5,) * 4,
                                               (-0.5,) * 4))
    bn = dev.compile(pyvkgrad.BatchNormalizationTrainingGradDesc(
        big, big, small, small, small, big, small, small, 1e-5))
    relu = dev.compile(pyvkgrad.ActivationReluGradDesc(big, big, big))
    x = rng.standard_normal(big.sizes).astype(np.float32)
    t = {k: dev.upload(v) for k, v in dict(
        dy=rng.standard_normal(up.sizes).astype(np.float32), x=x,
        mean=x.mean(axis=(0, 2, 3), keepdims=True), var=x.var(axis=(0, 2, 3), keepdims=True),
        scale=np.ones((1, c, 1, 1), np.float32), relu_x=x).items()}
    g1, g2, g3 = dev.empty(big), dev.empty(big), dev.empty(big)
    ds, db = dev.empty(small), dev.empty(small)
    steps = [
        (rs, dict(input_gradient_tensor=t["dy"], output_gradient_tensor=g1)),
        (bn, dict(input_tensor=t["x"], input_gradient_tensor=g1, mean_tensor=t["mean"],
                  variance_tensor=t["var"], scale_tensor=t["scale"], output_gradient_tensor=g2,
                  output_scale_gradient_tensor=ds, output_bias_gradient_tensor=db)),
        (relu, dict(input_tensor=t["relu_x"], input_gradient_tensor=g2, output_gradient_tensor=g3)),
    ]
    parts = [vulkan_time(dev, op, ts, repeat)[0] for op, ts in steps]
    with dev.record(timestamps=True) as rec:
        for op, ts in steps:
            rec.execute(op, **ts)
    chain_kernel = timed_replays(rec, repeat)
    # Wall time from a recording without timestamp queries, like the tiny one below.
    with dev.record() as plain:
        for op, ts in steps:
            plain.execute(op, **ts)
    walls = replay_walls_ns(plain, repeat)
    # One submission of a trivial dispatch: the fixed cost a submission adds.
    subs = replay_walls_ns(tiny_recording(dev), repeat)
    budget = sum(parts) + statistics.median(subs)
    parts = [float(p) for p in parts]
    return {"shape": [n, c, h, w], "parts_kernel_ns": parts, "chain_kernel_ns": float(chain_kernel),
            "chain_wall_ns": statistics.median(walls), "submission_ns": statistics.median(subs),
            "sum_parts_plus_submission_ns": float(budget),
            "chain_wall_over_budget": float(statistics.median(walls) / budget),
            "barriers": plain.labels.count("barrier"), "wait_spin_us": dev.wait_spin_us}
