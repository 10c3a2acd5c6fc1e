"""The bridge's chains: one autograd Function whose forward runs in PyTorch and whose backward
runs on a Vulkan device.

Every bridged call is a chain of one or more steps (ReLU / threshold, hardtanh / relu6, batch
norm, interpolate)
run by one `torch.autograd.Function`: the forward calls PyTorch's own operators step by step;
the backward records every step's DirectML gradient into one submission (`_runtime.Program`),
so a chain's intermediate gradients never leave the device. A single function call is a chain
of one step (`functional.py`); `pyvkgrad.torch.Sequential` chains consecutive bridged modules
(`modules.py`).

Layout. A chain works in the memory order of its input: the permutation P that makes the
input contiguous (identity for contiguous tensors, (0, 2, 3, 1) for channels_last). Host
arrays travel packed in that order (no copy for inputs already laid out so), and gradients come
back as tensors with the input's strides, dtype and torch device.
"""

from __future__ import annotations

import functools
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from ..ops.activation_relu_grad import ActivationReluGradDesc
from ..ops.element_wise_clip_grad import ElementWiseClipGradDesc
from ..ops.resample_grad import ResampleGradDesc
from ..tensor import DataType, TensorDesc
from . import _resample_map as rmap
from . import _runtime

DATA_TYPES = {torch.float32: DataType.FLOAT32, torch.float16: DataType.FLOAT16}


def data_type_of(t: torch.Tensor, what: str) -> DataType:
    data_type = DATA_TYPES.get(t.dtype)
    if data_type is None:
        raise TypeError(f"pyvkgrad.torch.{what}: {t.dtype} tensors are not supported: "
                        f"DirectML's gradients take float32 or float16")
    return data_type


def needs_grad(input, *tensors) -> bool:
    """Whether a bridged backward is needed: grad mode, something requiring grad, and any
    elements at all (an empty tensor's gradient is empty: PyTorch's own path returns it)."""
    return (torch.is_grad_enabled() and input.numel() > 0
            and any(t is not None and isinstance(t, torch.Tensor) and t.requires_grad
                    for t in (input, *tensors)))


# ---- layout --------------------------------------------------------------------------------------

def memory_order(t: torch.Tensor) -> Tuple[int, ...]:
    """The permutation P with t.permute(P) contiguous (outermost first), for tensors laid out
    densely in some order (contiguous, channels_last, ...); identity otherwise."""
    identity = tuple(range(t.dim()))
    if t.dim() <= 1:
        return identity
    order = tuple(sorted(identity, key=lambda d: (-t.stride(d), d)))
    return order if t.permute(order).is_contiguous() else identity


def _inverse(perm: Sequence[int]) -> Tuple[int, ...]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def _permuted(shape, perm) -> Tuple[int, ...]:
    return tuple(int(shape[p]) for p in perm)


def _to_host(t: torch.Tensor, perm, dtype: torch.dtype) -> np.ndarray:
    """t as a packed numpy array in the order `perm`, of `dtype` (no copy when t is already
    a packed CPU tensor in that order)."""
    t = t.detach()
    if t.dtype != dtype:
        t = t.to(dtype)
    t = t.permute(perm).contiguous()
    if t.device.type != "cpu":
        t = t.cpu()
    return t.numpy()


def _from_host(array: np.ndarray, perm, device: torch.device) -> torch.Tensor:
    """The inverse of `_to_host`: a tensor with the logical shape, strides of the order `perm`."""
    t = torch.from_numpy(array).permute(_inverse(perm))
    return t if device.type == "cpu" else t.to(device)


# ---- steps ---------------------------------------------------------------------------------------

class _Builder:
    """Collects one backward's program: host inputs, operators, outputs."""

    def __init__(self, data_type: DataType, torch_dtype: torch.dtype, perm):
        self.data_type = data_type
        self.torch_dtype = torch_dtype
        self.perm = perm
        self.inputs, self.arrays, self.bound = {}, {}, {}
        self.ops: List[Tuple[object, dict]] = []
        self.outputs: List[str] = []

    def desc(self, sizes) -> TensorDesc:
        return TensorDesc(self.data_type, tuple(int(s) for s in sizes))

    def tensor(self, name: str, t: torch.Tensor) -> TensorDesc:
        """A host input from a torch tensor of the chain's logical rank, in the chain order."""
        return self.array(name, _to_host(t, self.perm, self.torch_dtype))

    def array(self, name: str, array: np.ndarray) -> TensorDesc:
        array = np.ascontiguousarray(array, dtype=self.data_type.numpy_dtype)
        desc = self.desc(array.shape)
        self.inputs[name], self.arrays[name] = desc, array
        return desc

    def op(self, desc, **binding: str) -> None:
        self.ops.append((desc, binding))


class Step:
    """One bridged operator: its PyTorch forward and its DirectML backward."""

    n_params = 0
    what = ""

    def fits(self, perm, x_shape, y_shape) -> bool:
        """Whether the step's backward can work in the chain order `perm`."""
        return True

    def forward(self, x: torch.Tensor, params) -> Tuple[torch.Tensor, dict]:
        raise NotImplementedError

    def backward(self, b: _Builder, k: int, dy: str, x_shape, y_shape, saved: dict) -> str:
        """Record this step's gradient from the tensor named `dy` (the step's output gradient,
        packed in the chain order; x_shape and y_shape are the step's logical input and output
        shapes); return the name of its input gradient."""
        raise NotImplementedError

    def param_grads(self, k: int, params) -> List[Optional[str]]:
        """Per parameter, the program output holding its gradient (None: no gradient)."""
        return [None] * self.n_params


class ReluStep(Step):
    """relu (threshold None) or threshold(x, threshold, value): dX = ReluGrad(X', dY) with
    X' the output (relu) or x - threshold (threshold, in float32)."""

    def __init__(self, inplace: bool, threshold=None, value=None):
        self.inplace, self.threshold, self.value = inplace, threshold, value
        self.what = "relu" if threshold is None else "threshold"

    def forward(self, x, params):
        if self.threshold is None:
            y = torch.relu_(x) if self.inplace else torch.relu(x)
            return y, {"x": y}
        # PyTorch compares x <= threshold with the threshold in float32 (float16 tensors
        # included): the sign of x - threshold in float32 is that comparison. Stored in x's
        # dtype, a positive difference too small for float16 keeps its sign (smallest
        # subnormal), so ReLU grad's X > 0 is exactly PyTorch's x > threshold.
        diff = x.detach().float() - float(np.float32(self.threshold))
        if x.dtype == torch.float16:
            d16 = diff.half()
            tiny = torch.tensor(2.0**-24, dtype=torch.float16, device=x.device)
            diff = torch.where((diff > 0) & ~(d16 > 0), tiny, d16)
        y = (F.threshold_ if self.inplace else F.threshold)(x, self.threshold, self.value)
        return y, {"x": diff}

    def backward(self, b, k, dy, x_shape, y_shape, saved):
        desc = b.tensor(f"x{k}", saved["x"])
        b.op(ActivationReluGradDesc(desc, desc, desc), input_tensor=f"x{k}",
             input_gradient_tensor=dy, output_gradient_tensor=f"dx{k}")
        return f"dx{k}"


class ClipStep(Step):
    """hardtanh(x, min_val, max_val) (relu6: 0, 6): dX = ELEMENT_WISE_CLIP_GRAD(x, dY) with
    PyTorch's bounds as float32 (PyTorch compares float16 tensors with float32 bounds too).
    The input is kept (a copy when the step works in place): the output, clamped to the
    bounds in the tensor's type, could cross a bound float16 does not hold."""

    def __init__(self, min_val: float, max_val: float, inplace: bool, what: str = "hardtanh"):
        self.min_val, self.max_val, self.inplace, self.what = min_val, max_val, inplace, what

    def forward(self, x, params):
        if self.inplace:
            kept = x.detach().clone()
            return F.hardtanh_(x, self.min_val, self.max_val), {"x": kept}
        return F.hardtanh(x, self.min_val, self.max_val), {"x": x}

    def backward(self, b, k, dy, x_shape, y_shape, saved):
        desc = b.tensor(f"x{k}", saved["x"])
        b.op(ElementWiseClipGradDesc(desc, desc, desc, self.min_val, self.max_val),
             input_tensor=f"x{k}", input_gradient_tensor=dy, output_gradient_tensor=f"dx{k}")
        return f"dx{k}"


# The tests of a batched tensor this torch has (looked up once: every backward asks).
_BATCHED_TESTS = tuple(
    test for test in (getattr(getattr(torch._C, "_functorch", None), name, None)
                      for name in ("is_legacy_batchedtensor", "is_batchedtensor"))
    if test is not None)


def _batched(grad) -> bool:
    """A batched tensor: what jacobian(vectorize=True) and grad(is_grads_batched=True) pass a
    backward (the legacy vmap's), or functorch's."""
    return isinstance(grad, torch.Tensor) and any(test(grad) for test in _BATCHED_TESTS)


def single_backward(backward):
    """A bridged Function's backward: once_differentiable, and refused where autograd would
    record it for a second differentiation (create_graph=True). The device's gradients have no
    graph; once_differentiable alone lets torch.autograd.grad(..., allow_unused=True) return a
    gradient silently cut at them (a gradient penalty through a bridged ReLU, say)."""
    once = once_differentiable(backward)

    @functools.wraps(backward)
    def refusing(ctx, *grads):
        if any(_batched(g) for g in grads):
            raise RuntimeError("pyvkgrad.torch: a bridged operator's backward takes one "
                               "gradient at a time, not a batch of them (vmap, "
                               "jacobian(vectorize=True), grad(is_grads_batched=True)): "
                               "compute them one by one (jacobian's default)")
        if torch.is_grad_enabled():
            raise RuntimeError("pyvkgrad.torch: a bridged operator's backward cannot be "
                               "differentiated (create_graph=True, a double backward): "
                               "DirectML's gradient operators have no gradients of their own; "
                               "use PyTorch's operator where a second derivative is needed")
        return once(ctx, *grads)
    return refusing


class InterpolateStep(Step):
    """F.interpolate in a mode DirectML's ResampleGrad expresses."""

    what = "interpolate"

    def __init__(self, size, scale_factor, mode, align_corners, recompute_scale_factor):
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners, self.recompute = align_corners, recompute_scale_factor
        self.params = None

    def forward(self, x, params):
        y = F.interpolate(x, size=self.size, scale_factor=self.scale_factor, mode=self.mode,
                          align_corners=self.align_corners,
                          recompute_scale_factor=self.recompute)
        rank = x.dim() - 2
        if self.size is not None or self.recompute:
            kernel_scales = (None,) * rank
        elif isinstance(self.scale_factor, (list, tuple)):
            kernel_scales = tuple(float(s) for s in self.scale_factor)
        else:
            kernel_scales = (float(self.scale_factor),) * rank
        self.params = rmap.axis_params(torch, F, self.mode, tuple(x.shape[2:]),
                                       tuple(y.shape[2:]), kernel_scales, self.size,
                                       self.scale_factor, self.recompute, self.align_corners,
                                       x.device)
        return y, {}

    def _merged(self, perm, x_shape, y_shape):
        """Chain-order axes with adjacent unresampled ones merged and size-1 ones dropped:
        (dx sizes, dy sizes, params per axis)."""
        axes = []
        for p in perm:
            params = rmap.IDENTITY if p < 2 else self.params[p - 2]
            xs, ys = int(x_shape[p]), int(y_shape[p])
            if params.identity and xs == ys:
                if xs == 1:
                    continue
                if axes and axes[-1][2].identity and axes[-1][0] == axes[-1][1]:
                    n = axes[-1][0] * xs
                    axes[-1] = (n, n, rmap.IDENTITY)
                    continue
            axes.append((xs, ys, params))
        return axes or [(1, 1, rmap.IDENTITY)]

    def fits(self, perm, x_shape, y_shape) -> bool:
        return len(self._merged(perm, x_shape, y_shape)) <= 4

    def backward(self, b, k, dy, x_shape, y_shape, saved):
        axes = self._merged(b.perm, x_shape, y_shape)
        desc = ResampleGradDesc(
            b.desc([a[1] for a in axes]), b.desc([a[0] for a in axes]),
            rmap.interpolation_mode(self.mode), tuple(a[2].scale for a in axes),
            tuple(a[2].input_pixel_offset for a in axes),
            tuple(a[2].output_pixel_offset for a in axes), None, "gather")
        b.op(desc, input_gradient_tensor=dy, output_gradient_tensor=f"dx{k}")
        return f"dx{k}"


# ---- the chain -----------------------------------------------------------------------------------

class _Chain(torch.autograd.Function):
    """forward(ctx, steps, x, *params): PyTorch's forward of each step in turn (params: every
    step's parameters, in order); backward: every step's DirectML gradient in one program."""

    @staticmethod
    def forward(ctx, steps, x, *params):
        vk_device = _runtime.get_device()
        data_type = data_type_of(x, steps[0].what)
        split, i = [], 0
        for step in steps:
            split.append(params[i:i + step.n_params])
            i += step.n_params
        h, saved, shapes = x, [], []
        for step, p in zip(steps, split):
            shape_in = tuple(h.shape)
            h, s = step.forward(h, p)
            saved.append(s)
            shapes.append((shape_in, tuple(h.shape)))
        y = h
        if y is x:
            ctx.mark_dirty(x)  # a lone in-place step
        perm = memory_order(x)
        # The input's strides, to give its gradient the same when the chain cannot work in
        # the input's order (5-D channels_last_3d interpolate with N, C > 1: ResampleGrad has
        # four dimensions, and only N and C adjacent in memory fold into one).
        ctx.restride = None
        if not all(s.fits(perm, xs, ys) for s, (xs, ys) in zip(steps, shapes)):
            ctx.restride = x.stride()
            perm = tuple(range(x.dim()))
        # Function inputs and the output go through save_for_backward (version-checked like
        # PyTorch's own saved tensors); tensors made inside the chain are kept as they are.
        graph = [x, *params, y]
        to_save, refs = [], []
        for s in saved:
            ref = {}
            for name, t in s.items():
                if t is not None and any(t is g for g in graph):
                    ref[name] = ("saved", len(to_save))
                    to_save.append(t)
                else:
                    ref[name] = ("own", t)
            refs.append(ref)
        ctx.save_for_backward(*to_save)
        ctx.steps, ctx.refs, ctx.shapes = steps, refs, shapes
        ctx.perm, ctx.data_type, ctx.vk_device = perm, data_type, vk_device
        ctx.x_dtype, ctx.x_device = x.dtype, x.device
        # Keep the input gradient on the device only when another bridged chain made x: that
        # chain's backward is then the one that receives it (and finds it unmodified).
        ctx.hand_off = isinstance(x.grad_fn, _Chain._backward_cls)
        ctx.param_meta = [None if p is None else (p.shape, p.dtype, p.device) for p in params]
        return y

    @staticmethod
    @single_backward
    def backward(ctx, dy):
        tensors = ctx.saved_tensors
        saved = [{name: (tensors[v] if kind == "saved" else v) for name, (kind, v) in r.items()}
                 for r in ctx.refs]
        steps, perm, dev = ctx.steps, ctx.perm, ctx.vk_device
        b = _Builder(ctx.data_type, ctx.x_dtype, perm)
        y_shape = ctx.shapes[-1][1]
        layout = (perm, _permuted(y_shape, perm), ctx.x_dtype)
        handed = _runtime.lookup(dy, layout, dev) if _runtime.hand_off_enabled() else None
        if handed is not None:
            b.inputs["dy"] = b.desc(layout[1])
            b.bound["dy"] = handed
        else:
            b.tensor("dy", dy)
        name = "dy"
        for k in reversed(range(len(steps))):
            xs, ys = ctx.shapes[k]
            name = steps[k].backward(b, k, name, xs, ys, saved[k])
        need_x = ctx.needs_input_grad[1]
        param_outputs, offset = [], 2
        for k, step in enumerate(steps):
            for j, out in enumerate(step.param_grads(k, None)):
                wanted = out is not None and ctx.needs_input_grad[offset + j]
                param_outputs.append(out if wanted else None)
            offset += step.n_params
        if need_x:
            b.outputs.append(name)
        b.outputs.extend(o for o in param_outputs if o is not None)
        prog = _runtime.program(dev, b.inputs, b.ops, b.outputs)
        keep = [name] if need_x and ctx.hand_off and _runtime.hand_off_enabled() else []
        results, kept = prog.run(b.arrays, b.bound, keep)
        dx = None
        if need_x:
            x_shape = _permuted(ctx.shapes[0][0], perm)
            dx = _from_host(results[name].reshape(x_shape), perm, ctx.x_device)
            if ctx.restride is not None:
                dx = torch.empty_strided(dx.shape, ctx.restride, dtype=dx.dtype,
                                         device=dx.device).copy_(dx)
            if name in kept:
                _runtime.register(dx, kept[name], (perm, x_shape, ctx.x_dtype))
        grads = []
        for out, meta in zip(param_outputs, ctx.param_meta):
            if out is None:
                grads.append(None)
                continue
            shape, dtype, device = meta
            grads.append(torch.from_numpy(results[out]).reshape(shape).to(device=device,
                                                                          dtype=dtype))
        return (None, dx, *grads)


def not_compiled(fn):
    """`fn` as torch.compile's Dynamo runs it, never traced: a bridged call reaches numpy and
    the Vulkan runtime (BatchNorm's training forward, nearest interpolate's tap search), which
    Dynamo cannot trace (it raised inside them); the graph breaks around the call instead."""
    compiler = getattr(torch, "compiler", None)
    disable = getattr(compiler, "disable", None)
    if disable is None:  # torch 2.0
        from torch import _dynamo
        disable = _dynamo.disable
    return functools.wraps(fn)(disable(fn))


@not_compiled
def apply_chain(steps: Sequence[Step], x: torch.Tensor, params: Sequence) -> torch.Tensor:
    """Run `steps` as one bridged chain on x (params: every step's parameters, in order).
    A 0-d tensor runs as one element (DirectML tensors have 1 to 8 dimensions)."""
    if x.dim() == 0:
        view = x.reshape(1)
        y = _Chain.apply(tuple(steps), view, *params)
        # An in-place chain returns its input: x itself, as PyTorch's in-place functions do
        # (changed through its view, x's history now ends in the chain's backward).
        return x if y is view else y.reshape(())
    return _Chain.apply(tuple(steps), x, *params)
