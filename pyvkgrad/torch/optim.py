"""pyvkgrad.torch.optim: optimizers whose step runs on the Vulkan device.

`Adam` is a drop-in for `torch.optim.Adam(params, lr, betas, eps)` whose step is DirectML's
ADAM_OPTIMIZER (docs/semantics.md §11): the moments live on the device between steps, and each
step uploads the parameter and its gradient, updates all three in place and reads the
parameter back.

One difference from PyTorch's Adam, by design: DirectML adds epsilon to sqrt(v') before the bias
correction (x' = x - lr alpha m' / (sqrt(v') + eps), alpha = sqrt(1 - beta2^t) / (1 - beta1^t)),
PyTorch after it (its eps is eps sqrt(1 - beta2^t) here). With the usual eps = 1e-8 the steps
differ by about eps / sqrt(v') of themselves, which matters only where gradients vanish. Over
100 steps of examples/train_digits.py (tests/test_torch_optim.py) the losses stay within 1e-3
of PyTorch's (4.8e-4 measured), the test accuracy is the same, and the parameters with real
gradients within 2e-3 (1.1e-3); two biases that feed a BatchNorm, whose gradients are rounding
noise, move by up to 0.03 differently.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, Optional, Tuple, Union

import numpy as np
import torch

from ..ops.adam_optimizer import AdamOptimizerDesc
from ..tensor import check_float
from . import _runtime

_FIELDS = ("input_parameters_tensor", "input_first_moment_tensor",
           "input_second_moment_tensor", "gradient_tensor", "training_step_tensor")
# torch.optim.Adam's other options, at the values that leave its step DirectML's: accepted at
# these values (in the constructor, a parameter group or a loaded state dict), refused at any
# other before any device work.
_TORCH_ONLY = dict(weight_decay=0.0, amsgrad=False, maximize=False, foreach=None,
                   capturable=False, differentiable=False, fused=None,
                   decoupled_weight_decay=False)


def _number(value: Union[float, torch.Tensor]) -> float:
    """lr, a beta or eps as a float (PyTorch also takes one-element tensors)."""
    return float(value.item()) if isinstance(value, torch.Tensor) else float(value)


class Adam(torch.optim.Optimizer):
    """Adam with PyTorch's arguments, its step on the bridge's device
    (`pyvkgrad.torch.set_device`). Parameters float32 or float16, on the CPU. weight_decay,
    amsgrad, maximize and the other options are accepted at their defaults only.

    The moments stay on the device between steps; `state_dict()` brings them back as
    PyTorch's `exp_avg` and `exp_avg_sq` (and `step`), so a checkpoint loads into this Adam or
    `torch.optim.Adam` alike, and `load_state_dict` takes either's."""

    def __init__(self, params: Iterable[Any], lr: Union[float, torch.Tensor] = 1e-3,
                 betas: Tuple[Union[float, torch.Tensor], Union[float, torch.Tensor]] = (
                     0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, amsgrad: bool = False, *,
                 foreach: Optional[bool] = None, maximize: bool = False,
                 capturable: bool = False, differentiable: bool = False,
                 fused: Optional[bool] = None, decoupled_weight_decay: bool = False) -> None:
        if not 0.0 <= _number(lr):
            raise ValueError(f"Adam: invalid learning rate: {lr}")
        if not 0.0 <= _number(eps):
            raise ValueError(f"Adam: invalid epsilon value: {eps}")
        for i, beta in enumerate(betas):
            if not 0.0 <= _number(beta) < 1.0:
                raise ValueError(f"Adam: invalid beta parameter at index {i}: {beta}")
        options = dict(weight_decay=weight_decay, amsgrad=amsgrad, foreach=foreach,
                       maximize=maximize, capturable=capturable,
                       differentiable=differentiable, fused=fused,
                       decoupled_weight_decay=decoupled_weight_decay)
        _check_options(options)
        # The device tensors and compiled operator of each parameter (not optimizer state:
        # they hold the device and cannot be saved; state_dict() gives their moments).
        self._device: Dict[torch.Tensor, Dict[str, Any]] = {}
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, **options))

    def _device_state(self, p: torch.Tensor, group: Dict[str, Any]) -> Dict[str, Any]:
        """The parameter's device tensors (x, m, v, g, T, flat) and its compiled operator: made
        on its first step (moments from the state, as `load_state_dict` left them, or zero),
        the operator again when the hyperparameters changed (the kernel is the same: a new
        learning rate compiles no pipeline)."""
        key = (_number(group["lr"]), *(_number(b) for b in group["betas"]),
               _number(group["eps"]))
        dev = self._device_of(p)
        if dev is None:
            device = _runtime.get_device()
            state = self.state[p]
            array = p.detach().cpu().numpy().reshape(-1)
            moments = [state.get(k) for k in ("exp_avg", "exp_avg_sq")]
            moments = [np.zeros_like(array) if t is None else
                       t.detach().cpu().numpy().astype(array.dtype).reshape(-1)
                       for t in moments]
            dev = dict(tensors=[device.upload(a) for a in
                                (array, *moments, np.zeros_like(array),
                                 np.zeros(1, np.uint32))])
            self._device[p] = dev
        if dev.get("key") != key:
            descs = [t.desc for t in dev["tensors"]]
            # (Closed first: every parameter's operator shares the kernel's one pipeline, which
            # the device keeps for the new operator's call.)
            if "operator" in dev:
                dev["operator"].close()
            dev["operator"] = self._compile(descs, *key)
            dev["key"] = key
        return dev

    @staticmethod
    def _compile(descs, lr: float, beta1: float, beta2: float, eps: float):
        return _runtime.get_device().compile(AdamOptimizerDesc(
            *descs, *descs[:3], lr, beta1, beta2, eps))

    def _check(self, p: torch.Tensor, group: Dict[str, Any]) -> None:
        """What the device step cannot take, refused before any parameter changes."""
        _check_options(group)
        for name, value in (("LearningRate", group["lr"]), ("Beta1", group["betas"][0]),
                            ("Beta2", group["betas"][1]), ("Epsilon", group["eps"])):
            check_float("ADAM_OPTIMIZER", name, _number(value))
        if p.grad.is_sparse:
            raise RuntimeError("Adam does not support sparse gradients")
        if p.dtype not in (torch.float32, torch.float16) or p.device.type != "cpu":
            raise TypeError(f"pyvkgrad.torch.optim.Adam: parameters must be float32 or "
                            f"float16 CPU tensors, got {p.dtype} on {p.device}")
        dev = self._device_of(p)
        if dev is not None:
            desc = dev["tensors"][0].desc
            if (desc.element_count, desc.data_type.numpy_dtype) != (
                    max(p.numel(), 1), p.detach().numpy().dtype):
                raise RuntimeError(f"pyvkgrad.torch.optim.Adam: a parameter changed from "
                                   f"{desc.element_count} {desc.data_type.name} elements to "
                                   f"{p.numel()} of {p.dtype}; its moments no longer fit it")
        step = self._next_step(p)
        if step >= 2 ** 32:
            raise ValueError(f"pyvkgrad.torch.optim.Adam: step {step} does not fit "
                             f"ADAM_OPTIMIZER's UINT32 TrainingStepTensor")

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], float]] = None) -> Optional[float]:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        live = [(p, group) for group in self.param_groups for p in group["params"]
                if p.grad is not None]
        for p, group in live:
            self._check(p, group)
        for p, group in live:
            state = self.state[p]
            step = self._next_step(p)
            if p.numel() > 0:
                dev = self._device_state(p, group)
                x, m, v, g, t = dev["tensors"]
                x.write(p.detach().numpy().reshape(-1))
                g.write(p.grad.detach().to(p.dtype).numpy().reshape(-1))
                t.write(np.array([step], np.uint32))
                bound = dict(zip(_FIELDS, (x, m, v, g, t)))
                dev["operator"](**bound, output_parameters_tensor=x,
                                output_first_moment_tensor=m, output_second_moment_tensor=v)
                p.copy_(torch.from_numpy(x.numpy()).reshape(p.shape))
            # The moments now live on the device alone (state_dict() brings them back).
            state.pop("exp_avg", None)
            state.pop("exp_avg_sq", None)
            state["step"] = torch.tensor(float(step))
        return loss

    def state_dict(self) -> Dict[str, Any]:
        """torch.optim.Adam's form: each parameter's `step`, `exp_avg` and `exp_avg_sq` (the
        device's moments, read back), so `torch.save` and `torch.optim.Adam` take it."""
        self._read_back()
        packed = super().state_dict()
        # Copies, so that an optimizer that loads them (torch.optim.Adam updates its step and
        # moments in place) cannot change this one's state.
        packed["state"] = {i: {k: v.detach().clone() if isinstance(v, torch.Tensor) else v
                               for k, v in state.items()}
                           for i, state in packed["state"].items()}
        return packed

    def _read_back(self) -> None:
        """The device's moments into the state as exp_avg and exp_avg_sq (torch's form)."""
        live = {p for group in self.param_groups for p in group["params"]}
        for p in [p for p in self._device if p not in live]:
            self._forget(p)  # no longer optimized
        for p in list(self._device):
            self._device_of(p)  # (forgets a reset state's moments)
        for p, dev in self._device.items():
            state = self.state[p]
            for k, tensor in zip(("exp_avg", "exp_avg_sq"), dev["tensors"][1:3]):
                moment = torch.from_numpy(tensor.numpy())
                state[k] = moment.reshape(p.shape) if moment.numel() == p.numel() else moment
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state.get(p)
                if state and "exp_avg" not in state and p.numel() == 0:
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p,
                                                           memory_format=torch.preserve_format)

    def __getstate__(self) -> Dict[str, Any]:
        # copy.deepcopy and pickling keep torch's state and groups: with the moments in it.
        self._read_back()
        return super().__getstate__()

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Takes this Adam's or torch.optim.Adam's state dict; the moments go to the device at
        each parameter's next step (their own copies: no two optimizers share them)."""
        for group in state_dict.get("param_groups", ()):
            _check_options(group)
        super().load_state_dict(state_dict)
        self._close_device()
        # Copies: PyTorch's load_state_dict keeps the dict's own step (and moment) tensors,
        # which the optimizer that saved them, or another that loaded them, may still change.
        for state in self.state.values():
            for k in ("step", "exp_avg", "exp_avg_sq"):
                if isinstance(state.get(k), torch.Tensor):
                    state[k] = state[k].detach().clone()

    def _device_of(self, p: torch.Tensor) -> Optional[Dict[str, Any]]:
        """p's device state, or None: none yet, or its optimizer state was reset
        (opt.state.clear(), or a new dict), and so are its moments (forgotten here)."""
        dev = self._device.get(p)
        if dev is not None and "step" not in self.state.get(p, {}):
            self._forget(p)
            return None
        return dev

    def _next_step(self, p: torch.Tensor) -> int:
        """The TrainingStepTensor of p's next step (torch keeps `step` as a float tensor)."""
        return int(_number(self.state[p].get("step", 0))) + 1

    def _forget(self, p: torch.Tensor) -> None:
        dev = self._device.pop(p)
        if "operator" in dev:
            dev["operator"].close()

    def _close_device(self) -> None:
        for p in list(self._device):
            self._forget(p)

    def __setstate__(self, state: Dict[str, Any]) -> None:
        # copy.deepcopy and pickling go through torch's __getstate__, which keeps only the
        # optimizer's state and groups: a copy makes its own device tensors at its next step.
        super().__setstate__(state)
        self.__dict__.setdefault("_device", {})


def _check_options(options: Dict[str, Any]) -> None:
    for name, default in _TORCH_ONLY.items():
        value = options.get(name, default)
        if default is None and value in (None, False):
            continue  # foreach and fused: None (PyTorch's choice) or off
        if value is not default and (value is None or value != default):
            raise ValueError(f"pyvkgrad.torch.optim.Adam: {name}={value!r} is not supported "
                             f"(DirectML's ADAM_OPTIMIZER has no such option; only "
                             f"{name}={default!r})")
