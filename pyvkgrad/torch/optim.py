"""pyvkgrad.torch.optim: optimizers whose step runs on the Vulkan device.

`Adam` is a drop-in for `torch.optim.Adam(params, lr, betas, eps)` whose step is DirectML's
ADAM_OPTIMIZER (docs/semantics.md §11): the moments live on the device between steps, and each
step uploads the parameters and their gradients, updates all three in place and reads the
parameters back, in one submission for each pack of parameters (_adam_pack.py: those of one
group, data type and step count, end to end).

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

from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from .._environment import interrupts_deferred
from ..tensor import buffer_words, check_float, fail
from . import _runtime
from ._adam_pack import Pack, count_in_place, parts, scalar_dtype
from ._chain import DATA_TYPES
# torch.optim.Adam's other options, at the values that leave its step DirectML's: accepted at
# these values (in the constructor, a parameter group or a loaded state dict), refused at any
# other before any device work.
_TORCH_ONLY = dict(weight_decay=0.0, amsgrad=False, maximize=False, foreach=None,
                   capturable=False, differentiable=False, fused=None,
                   decoupled_weight_decay=False)


def _number(value: Union[float, torch.Tensor]) -> float:
    """lr, a beta or eps as a float (PyTorch also takes one-element tensors)."""
    return float(value.item()) if isinstance(value, torch.Tensor) else float(value)


def _refuse_shared_memory(members: Sequence[torch.Tensor]) -> None:
    """Parameters stepped together must not share memory: the pack reads them all before the
    step and writes them all back, so one's update would overwrite the other's, where torch's
    Adam applies both, one after the other (two Parameters over one tensor, overlapping
    views). Raises ValueError naming the two."""
    spans = [(p.data_ptr(), p.data_ptr() + p.element_size() * _span(p), i)
             for i, p in enumerate(members) if p.numel()]
    spans.sort()
    active: List[Tuple[int, int]] = []  # (end, index) of the spans still open at `start`
    for start, end, j in spans:
        active = [(e, i) for e, i in active if e > start]
        for _, i in active:
            if _elements_meet(members[i], members[j]):
                raise ValueError(f"pyvkgrad.torch.optim.Adam: parameters {min(i, j)} and "
                                 f"{max(i, j)} of a step share memory (one tensor, or views "
                                 f"that overlap): the device steps them together, so one "
                                 f"update would overwrite the other; give them to separate "
                                 f"optimizers or untie them")
        active.append((end, j))


def _span(t: torch.Tensor) -> int:
    """Elements from t's first to one past its last (as TensorDesc.element_span)."""
    return 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))


def _has_moments(state: Dict[str, Any]) -> bool:
    """Whether a parameter's state holds moments (state_dict() read them back, or a loaded
    state brought them): the next step starts from them."""
    return "exp_avg" in state or "exp_avg_sq" in state


def _elements_meet(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors of one dtype whose extents overlap share an element (interleaved
    views, such as x[0::2] and x[1::2], do not)."""
    item, base = a.element_size(), min(a.data_ptr(), b.data_ptr())

    def offsets(t: torch.Tensor) -> np.ndarray:
        local = np.lib.stride_tricks.as_strided(
            np.arange(_span(t), dtype=np.int64), t.shape, [8 * st for st in t.stride()])
        return local.reshape(-1) + (t.data_ptr() - base) // item
    first, second = offsets(a), offsets(b)
    marked = np.zeros(int(max(first.max(), second.max())) + 1, bool)  # (one pass each)
    marked[first] = True
    return bool(marked[second].any())


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
        # Each parameter's pack: its moments on the device, with its pack's compiled operator
        # (not optimizer state: they hold the device and cannot be saved; state_dict() gives
        # their moments).
        self._device: Dict[torch.Tensor, Pack] = {}
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, **options))

    @staticmethod
    def _check_group(group: Dict[str, Any]) -> None:
        """What the device step cannot take of a group, refused before any parameter changes."""
        _check_options(group)
        for name, value in (("LearningRate", group["lr"]), ("Beta1", group["betas"][0]),
                            ("Beta2", group["betas"][1]), ("Epsilon", group["eps"])):
            check_float("ADAM_OPTIMIZER", name, _number(value))

    def _check(self, p: torch.Tensor, most: int) -> int:
        """What the device step cannot take of a parameter, refused before any changes; its
        next step. (The step's hot path: the usual parameter takes the shortest way.)"""
        grad = p.grad
        if grad.is_sparse:
            raise RuntimeError("Adam does not support sparse gradients")
        data_type = DATA_TYPES.get(p.dtype)
        if data_type is None or not p.is_cpu:
            raise TypeError(f"pyvkgrad.torch.optim.Adam: parameters must be float32 or "
                            f"float16 CPU tensors, got {p.dtype} on {p.device}")
        if not p.is_contiguous() and any(
                stride == 0 and size > 1 for stride, size in zip(p.stride(), p.shape)):
            raise ValueError("pyvkgrad.torch.optim.Adam: a parameter whose elements share "
                             "memory (an expanded view) cannot take a step's new values")
        if grad.dtype != p.dtype:  # (set through p.grad.data, past the grad setter's check)
            raise TypeError(f"pyvkgrad.torch.optim.Adam: a {grad.dtype} gradient for a "
                            f"{p.dtype} parameter (torch's Adam refuses it too)")
        if grad.shape != p.shape:
            raise RuntimeError(f"pyvkgrad.torch.optim.Adam: a gradient of shape "
                               f"{tuple(grad.shape)} for a parameter of shape "
                               f"{tuple(p.shape)}")
        n, state = p.numel(), self.state.get(p)
        nbytes = n * p.element_size()  # (a buffer rounds it up by less than 16)
        if nbytes > most - 16 and buffer_words(nbytes) * 4 > most:  # (before any pack steps)
            fail("ADAM_OPTIMIZER", "InputParametersTensor.Sizes", "make a tensor that "
                 "exceeds the maximum storage buffer range of the bridge's device",
                 f"<= {most} bytes", f"{nbytes} bytes")
        if not state:
            return 1
        pack = self._device.get(p)
        dtype = data_type.numpy_dtype
        if pack is not None and "step" in state:
            kept = [(pack.size_of(p), pack.dtype)]
        else:  # moments in the state (a loaded state dict, or a pack given back)
            kept = [(state[k].numel(), dtype) for k in ("exp_avg", "exp_avg_sq")
                    if isinstance(state.get(k), torch.Tensor)]
        for size, kept_dtype in kept:
            if size != n or kept_dtype != dtype:
                raise RuntimeError(f"pyvkgrad.torch.optim.Adam: a parameter changed from "
                                   f"{size} {np.dtype(kept_dtype).name} elements to {n} of "
                                   f"{p.dtype}; its moments no longer fit it")
        step = self._next_step(p)
        if step >= 2 ** 32:
            raise ValueError(f"pyvkgrad.torch.optim.Adam: step {step} does not fit "
                             f"ADAM_OPTIMIZER's UINT32 TrainingStepTensor")
        return step

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], float]] = None) -> Optional[float]:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        live = [(p, group) for group in self.param_groups for p in group["params"]
                if p.grad is not None]
        for group in {id(group): group for _, group in live}.values():
            self._check_group(group)
        most = _runtime.get_device().max_buffer_bytes
        steps = [self._check(p, most) for p, _ in live]
        # Parameters of one group, data type and step count step together (a pack per run of
        # them that fits a device buffer); empty ones only count the step.
        packs: Dict[Tuple[int, torch.dtype, int], Tuple[Dict[str, Any], list]] = {}
        empty = []
        for (p, group), step in zip(live, steps):
            if p.numel() == 0:
                empty.append((p, step))
            else:
                packs.setdefault((id(group), p.dtype, step), (group, []))[1].append(p)
        # Each run of members with the pack that steps them as it is, or None (a new one).
        work = [(members, step, (_number(group["lr"]), *(_number(b) for b in group["betas"]),
                                 _number(group["eps"])), self._reusable(members))
                for (_, _, step), (group, params) in packs.items()
                for members in parts(params, most)]
        for members, _, _, held in work:  # refused before any parameter changes
            if held is None:
                _refuse_shared_memory(members)
        for p, step in empty:
            self._stepped(p, step)
        for members, step, key, held in work:
            # Interrupts wait until the members' parameters and steps agree with the moments
            # the submission updated.
            with interrupts_deferred():
                pack = held if held is not None else self._new_pack(members)
                pack.adopt_steps([self.state[p] for p in members])
                try:
                    pack.step(step, key)
                finally:
                    if pack.stepped:  # the moments moved on: so does every step count
                        self._count_steps(pack, step)
        return loss

    def _count_steps(self, pack: Pack, step: int) -> None:
        """The members' state after their step: the step counted (in place, by the pack),
        and the moments on the device alone (state_dict() brings them back)."""
        states = [self.state[p] for p in pack.params]
        pack.count_steps(states, step)
        for state in states:
            if _has_moments(state):
                state.pop("exp_avg", None)
                state.pop("exp_avg_sq", None)

    def _stepped(self, p: torch.Tensor, step: int) -> None:
        """An empty p's state after its step (it has no pack): the step counted, in place
        where torch's Adam counts in place."""
        state = self.state[p]
        if not count_in_place(state.get("step"), step):
            state["step"] = torch.tensor(float(step), dtype=scalar_dtype())
        state.pop("exp_avg", None)
        state.pop("exp_avg_sq", None)

    def _reusable(self, members: Sequence[torch.Tensor]) -> Optional[Pack]:
        """The pack of exactly `members` if it can step them as it is: their state not reset,
        and no moments in it (state_dict() read them back, and the caller may have changed
        them since: a new pack steps from those)."""
        pack = self._device.get(members[0])
        if pack is None or not pack.holds(members):
            return None
        for p in members:
            state = self.state[p]
            if "step" not in state or _has_moments(state):
                return None
        return pack

    def _new_pack(self, members: Tuple[torch.Tensor, ...]) -> Pack:
        """A new pack of exactly `members` (where `_reusable` has none). Their packs give the
        moments back to the state first (all of a pack's members', as a pack's tensors are
        whole), and the new pack takes them from there (or zeros)."""
        for p in members:
            if p in self._device:
                self._dissolve(self._device[p])
        moments = []
        for p in members:
            array = p.detach().numpy().reshape(-1)
            state = self.state[p]
            moments.append(tuple(
                np.zeros_like(array) if state.get(k) is None else
                state[k].detach().cpu().numpy().astype(array.dtype).reshape(-1)
                for k in ("exp_avg", "exp_avg_sq")))
        pack = Pack(members, moments)
        for p in members:
            self._device[p] = pack
        return pack

    def _dissolve(self, pack: Pack, keep: bool = True) -> None:
        """Close `pack`; with `keep`, first its moments into the state as exp_avg and exp_avg_sq
        (torch's form) of each member whose state was not reset (opt.state.clear(), or a new
        dict: as torch's Adam, that parameter starts again from zero moments)."""
        # (A closed device's pack raises ClosedError here: its moments are gone, and a step
        # from zero moments at a later step count would be wrong without a word.)
        if keep and any(self._has_state(p) for p in pack.params):
            for p, moments in zip(pack.params, pack.moments()):
                # (moments already in the state, read back and perhaps changed since, stay)
                if self._has_state(p) and not _has_moments(self.state[p]):
                    self._keep_moments(p, moments)
        for p in pack.params:
            if self._device.get(p) is pack:
                del self._device[p]
        pack.close()

    def _keep_moments(self, p: torch.Tensor, moments: Tuple[np.ndarray, np.ndarray]) -> None:
        """p's moments (flat arrays) into its state as exp_avg and exp_avg_sq, in p's shape
        (flat where p was resized since)."""
        for k, moment in zip(("exp_avg", "exp_avg_sq"), moments):
            moment = torch.from_numpy(moment)
            self.state[p][k] = moment.reshape(p.shape) if moment.numel() == p.numel() else moment

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
        for pack in set(self._device.values()):
            # A pack with a member no longer optimized, or whose state was reset, gives its
            # moments back and goes; the others read theirs back and stay.
            if not all(p in live and self._has_state(p) for p in pack.params):
                self._dissolve(pack)
                continue
            for p, moments in zip(pack.params, pack.moments()):
                self._keep_moments(p, moments)
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
        # (normal tensors even under inference_mode, so that steps can count them in place)
        with torch.inference_mode(False):
            for state in self.state.values():
                for k in ("step", "exp_avg", "exp_avg_sq"):
                    if isinstance(state.get(k), torch.Tensor):
                        state[k] = state[k].detach().clone()

    def _has_state(self, p: torch.Tensor) -> bool:
        """Whether p has stepped and its state was not reset since (opt.state.clear(), a
        popped entry or a new dict: then, as torch's Adam, it starts again from zero
        moments)."""
        return "step" in self.state.get(p, {})

    def _next_step(self, p: torch.Tensor) -> int:
        """The TrainingStepTensor of p's next step (torch keeps `step` as a float tensor)."""
        held = self.state[p].get("step", 0)
        return int(held.item() if type(held) is torch.Tensor else _number(held)) + 1

    def _close_device(self) -> None:
        """Drop every pack without reading its moments back (a loaded state replaces them)."""
        for pack in set(self._device.values()):
            self._dissolve(pack, keep=False)

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
