"""The device side of `pyvkgrad.torch.optim.Adam`: parameters stepped together in one submission.

A pack holds parameters of one group, data type and step count. Their elements lie end to end
in flat device tensors: the parameters x, the moments m and v, the gradients g, and the
TrainingStepTensor T. One compiled ADAM_OPTIMIZER steps all of them, and one recording uploads
what the host wrote, runs it, and reads the new x back, in a single submission. ADAM_OPTIMIZER
works element by element, so a parameter's bits do not depend on which pack it is in, or where.

Before packs, each parameter had its own operator. A step then cost two submissions per
parameter (its call, then its read-back), and a new learning rate rebuilt every parameter's
operator. Now a step costs one submission per pack, and a new learning rate only changes the
recording's push constants (benchmarks/RESULTS.md, "2026-12-04 (night)").
"""

from __future__ import annotations

import itertools
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch

from ..device import context_of
from ..device_tensor import DeviceTensor, make_tensor
from ..kernels import float_word
from ..tensor import TensorDesc
from ..ops.adam_optimizer import AdamOptimizerDesc
from . import _runtime
from ._chain import DATA_TYPES

FIELDS = ("input_parameters_tensor", "input_first_moment_tensor",
          "input_second_moment_tensor", "gradient_tensor", "training_step_tensor")
OUTPUTS = ("output_parameters_tensor", "output_first_moment_tensor",
           "output_second_moment_tensor")
ACTION = "pyvkgrad.torch.optim.Adam.step"


def _copy_all(dst: Sequence[torch.Tensor], src: Sequence[torch.Tensor]) -> None:
    """dst[i].copy_(src[i]) for every i: in one torch call where it can, else one by one, every
    pair copied even if one fails (the first failure raised after)."""
    try:
        torch._foreach_copy_(dst, src)
        return
    except Exception:  # (an older torch, or a pair it refuses: each alone)
        pass
    failed = None
    for d, s in zip(dst, src):
        try:
            d.copy_(s)
        except Exception as e:
            failed = failed or e
    if failed is not None:
        raise failed


def scalar_dtype() -> torch.dtype:
    """The dtype of torch's Adam's step tensors (float64 under a float64 default dtype)."""
    try:
        from torch.optim.optimizer import _get_scalar_dtype
        return _get_scalar_dtype()
    except ImportError:  # (an older torch)
        return torch.float32


def count_in_place(held: object, step: int) -> bool:
    """A step tensor set to `step` in place where torch's Adam would change it in place (not
    an inference tensor outside inference mode); False where it was not (the caller makes a
    new one)."""
    if not isinstance(held, torch.Tensor) or held.is_inference():
        return False
    try:
        held.fill_(float(step))  # (Adam.step runs under no_grad)
        return True
    except Exception:  # (a tensor that takes no in-place change)
        return False


def parts(params: Sequence[torch.Tensor], most_bytes: int) -> List[Tuple[torch.Tensor, ...]]:
    """`params` (one data type) cut in order into runs that each fit one device buffer
    (`most_bytes`, less the buffers' 16-byte rounding). A parameter that fits a buffer only
    alone is a run of its own (Adam's checks refuse larger ones)."""
    if not params:
        return []
    most = (most_bytes - 16) // params[0].element_size()
    runs: List[List[torch.Tensor]] = [[]]
    count = 0
    for p in params:
        if runs[-1] and count + p.numel() > most:
            runs.append([])
            count = 0
        runs[-1].append(p)
        count += p.numel()
    return [tuple(run) for run in runs]


class Pack:
    """Parameters (`params`, each with at least one element, one data type) stepped together:
    their moments start as `moments` (per parameter, (m, v) as flat arrays of its dtype)."""

    def __init__(self, params: Tuple[torch.Tensor, ...],
                 moments: Sequence[Tuple[np.ndarray, np.ndarray]]) -> None:
        self.device = _runtime.get_device()
        self.params = params
        self._index = {id(p): i for i, p in enumerate(params)}  # (held: the ids stay theirs)
        # Where the members' memory was: one re-pointed since (p.data = another's) makes a
        # new pack, whose members are checked for shared memory again.
        self._pointers = tuple(p.data_ptr() for p in params)
        self.sizes = tuple(p.numel() for p in params)
        self.offsets = tuple(itertools.accumulate(self.sizes, initial=0))
        self.dtype = DATA_TYPES[params[0].dtype].numpy_dtype
        # Views of x's, g's and x_out's host memory shaped like the members, for the members'
        # shapes when made (a parameter reshaped in place makes them again).
        self._shapes: Tuple[torch.Size, ...] = ()
        self._views: List[List[torch.Tensor]] = []
        # The float32 words of the (LearningRate, Beta1, Beta2, Epsilon) recorded.
        self.key: Tuple[int, ...] = ()
        self.stepped = False  # the last step's submission ran (the moments moved on)
        # The members' step counts (their states' "step": torch's scalar tensors), which a
        # step changes in place, as torch's Adam does. Those that can live in one element of
        # `steps` do (adopt_steps), so that one torch call counts them all (count_steps).
        self.steps = torch.zeros(len(params), dtype=scalar_dtype())
        self.step_tensors: List[Optional[torch.Tensor]] = [None] * len(params)
        self._step_addresses = [self.steps[i].data_ptr() for i in range(len(params))]
        self._operator = None
        self._recording = None
        m = np.concatenate([a for a, _ in moments]).astype(self.dtype, copy=False)
        v = np.concatenate([b for _, b in moments]).astype(self.dtype, copy=False)
        desc = TensorDesc(DATA_TYPES[params[0].dtype], (self.offsets[-1],))
        # x and g are inputs the host writes (Runtime.input_kind). In mapped device memory the
        # new x goes to a staged tensor of its own (x_out); elsewhere x is stepped in place.
        context = context_of(self.device)
        kind = self.device.runtime().input_kind
        self.tensors: List[DeviceTensor] = []
        self.x_out: Optional[DeviceTensor] = None
        if m.size != self.offsets[-1] or v.size != self.offsets[-1]:
            raise AssertionError(f"moments of {m.size} and {v.size} for {self.sizes}")
        try:
            self.tensors += [make_tensor(context, desc, kind), self.device.upload(m),
                             self.device.upload(v), make_tensor(context, desc, kind),
                             self.device.upload(np.zeros(1, np.uint32))]
            self.x_out = self.device.empty(desc) if kind == "mapped" else self.tensors[0]
        except BaseException:
            self.close()
            raise

    def _all_tensors(self) -> List[DeviceTensor]:
        """The pack's device tensors, x_out among them (once where it is x)."""
        return self.tensors + ([self.x_out] if self.x_out not in (None, *self.tensors) else [])

    @property
    def alive(self) -> bool:
        """Whether the pack's device tensors are open (a device close ends them)."""
        return not any(t.closed for t in self._all_tensors())

    def holds(self, params: Tuple[torch.Tensor, ...]) -> bool:
        """Whether the pack holds exactly `params`, in order, open on the bridge's device."""
        return (len(params) == len(self.params)
                and all(a is b and a.data_ptr() == at
                        for a, b, at in zip(params, self.params, self._pointers))
                and self.device is _runtime.get_device() and self.alive)

    def size_of(self, p: torch.Tensor) -> int:
        """The element count the pack keeps moments for, for member p."""
        return self.sizes[self._index[id(p)]]

    def _adoptable(self, held: object) -> bool:
        """Whether a step tensor can move into `steps` unseen: a plain scalar of its dtype on
        the CPU, no view (its base would stop following it), no grad, no inference tensor."""
        return (type(held) is torch.Tensor and held.dtype == self.steps.dtype  # type: ignore
                and held.dim() == 0 and held.is_cpu and not held.requires_grad
                and not held.is_inference() and not held._is_view())

    def adopt_steps(self, states: Sequence[dict]) -> None:
        """Before a step, for each member's state (`states`, in the members' order): its step
        tensor moves into `steps`, the same object with its value, where it can; one this
        pack held but the state no longer holds (replaced by hand) moves out to storage of
        its own, so that later counts do not reach it (as with torch's Adam)."""
        for i, state in enumerate(states):
            held, kept = state.get("step"), self.step_tensors[i]
            if held is kept and held is not None and held.data_ptr() == self._step_addresses[i]:
                continue  # (the usual member: in place already)
            if kept is not None and kept.data_ptr() == self._step_addresses[i]:
                kept.set_(kept.clone().untyped_storage(), 0, (), ())
            self.step_tensors[i] = None
            if self._adoptable(held):
                self.steps[i] = held  # (the value, then the object)
                held.set_(self.steps.untyped_storage(), i, (), ())  # (under no_grad)
                self.step_tensors[i] = held

    def count_steps(self, states: Sequence[dict], step: int) -> None:
        """After a step that ran: every member's step to `step`, in place (adopt_steps' in one
        call; another tensor by itself, as torch counts it), or a new tensor in `steps` where
        there was none, an inference tensor or a number. Raises nothing: the step has run."""
        self.steps.fill_(float(step))
        for i, state in enumerate(states):
            if self.step_tensors[i] is not None:
                continue
            if not count_in_place(state.get("step"), step):
                held = torch.zeros((), dtype=self.steps.dtype)
                held.set_(self.steps.untyped_storage(), i, (), ())
                self.step_tensors[i] = state["step"] = held

    def step(self, training_step: int, key: Tuple[float, ...]) -> None:
        """One Adam step of every member at `training_step` with `key`'s scalars: upload the
        parameters and gradients, step, and copy the new parameters into the members. A new
        key changes the recording's push constants, or where its kernel differs (a Beta1
        below 1/2, say) compiles a new operator and records again."""
        x, _, _, g, t = self.tensors
        words = tuple(float_word(k) for k in key)  # (0.0 and -0.0 differ, as in the kernel)
        if words != self.key:
            descs = [tensor.desc for tensor in self.tensors]
            desc = AdamOptimizerDesc(*descs, *descs[:3], *key)
            updated = self._recording is not None
            if updated:
                # The usual case: a schedule's new learning rate and betas are push
                # constants, which the recording takes as they are (nothing compiled).
                try:
                    self._recording.update_push_constants(self._operator, desc)
                except ValueError:  # (more than push constants differ)
                    updated = False
            if not updated:
                self._close_call()
                self._operator = self.device.compile(desc)
            self.key = words
        self.stepped = False
        shapes = tuple(p.shape for p in self.params)
        with context_of(self.device).lock:
            # Into the buffers' host memory (mapped device memory, or staging), one torch call
            # for all the members each way, through views shaped like them (Adam.step runs
            # under no_grad).
            for tensor in (x, g):
                tensor.storage.overwritten_elements(ACTION)
            if shapes != self._shapes:
                self._views = [self._shaped(tensor) for tensor in (x, g, self.x_out)]
                self._shapes = shapes
            _copy_all(self._views[0], self.params)
            _copy_all(self._views[1], [p.grad for p in self.params])  # (any dtype)
            t.storage.overwritten_elements(ACTION)[0] = training_step
            if self._recording is None:
                recording = self.device.record()
                try:
                    recording.execute(self._operator, **dict(zip(FIELDS, self.tensors)),
                                      **dict(zip(OUTPUTS, [self.x_out, *self.tensors[1:3]])))
                    recording.read_back([self.x_out])
                    recording.submit()
                except BaseException:
                    recording.close()
                    raise
                self._recording = recording
            else:
                self._recording.replay()
            self.stepped = True
            # Straight from the staging words the submission read x back into.
            self.x_out.storage.host_words(ACTION)
            _copy_all(list(self.params), self._views[2])

    def _shaped(self, tensor: DeviceTensor) -> List[torch.Tensor]:
        """Views of a tensor's host memory shaped like the members (kept while the shapes
        hold: the memory stays mapped until the pack closes)."""
        elements = tensor.storage.buffer.words().view(self.dtype)
        flat = torch.from_numpy(elements[: self.offsets[-1]])
        return [part.view(p.shape) for p, part in zip(self.params, flat.split(self.sizes))]

    def moments(self) -> List[Tuple[np.ndarray, np.ndarray]]:
        """Each member's (m, v), read back from the device as new flat arrays."""
        m, v = (self.tensors[i].numpy() for i in (1, 2))
        return [(m[a:b], v[a:b]) for a, b in zip(self.offsets, self.offsets[1:])]

    def _close_call(self) -> None:
        for thing in (self._recording, self._operator):
            if thing is not None:
                thing.close()
        self._recording = self._operator = None
        self.key = ()

    def close(self) -> None:
        """Release the pack's recording, operator and device tensors."""
        self._views, self._shapes = [], ()  # (their memory goes)
        self._close_call()
        for tensor in self._all_tensors():
            tensor.close()
