"""Compiled operators: a descriptor compiled for one device, its plan, kernels and scratch.

`compile_operator` is `Device.compile`: it refuses what the device cannot bind before any
device work, plans, and loads every kernel. A compiled operator caches a pipeline per kernel,
specialization, workgroup count and bound-buffer set (a pass's slices share one), and a
recorded call per bound-tensor set, so calling it again with the same tensors records nothing.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from . import _vulkan_info, kernels
from ._context import DeviceContext, Session
from ._environment import interrupts_deferred
from ._state import Lifetime
from .device_tensor import DeviceTensor, TensorStorage
from .plan import Dispatch, Limits, OperatorDesc, Plan
from .recording import Recording
from .runtime import Buffer, Program
from .tensor import TensorDesc, buffer_words, dml_name, fail

if TYPE_CHECKING:
    from .device import Device

# Per compiled operator: bound-tensor sets whose pipelines and command buffers are kept.
OPERATOR_CACHE_ENTRIES = 8


def compile_operator(context: DeviceContext, desc: OperatorDesc,
                     limits: Optional[Limits] = None) -> "CompiledOperator":
    """`Device.compile`: validate, plan and load the kernels of an operator descriptor."""
    if not isinstance(desc, OperatorDesc):
        raise TypeError(f"Device.compile needs an operator descriptor, got "
                        f"{type(desc).__name__}")
    most_bytes = context.max_buffer_bytes
    for name, (t, _) in desc.tensor_fields():
        if buffer_words(t.total_tensor_size_in_bytes) * 4 > most_bytes:
            fail(desc.OPERATOR, f"{dml_name(name)}.Sizes", "make a tensor that exceeds the "
                 f"maximum storage buffer range of {context.name} (compiled operators bind "
                 f"whole buffers; the one-call functions cut such problems where they can)",
                 f"<= {most_bytes} bytes", f"{t.total_tensor_size_in_bytes} bytes")
    limits = context.limits if limits is None else limits
    plan = desc.plan(limits)
    for scratch in plan.scratch:  # bound like the tensors: binding more is invalid usage
        if buffer_words(scratch.nbytes) * 4 > most_bytes:
            fail(desc.OPERATOR, f"scratch buffer {scratch.name!r}", "exceeds the maximum "
                 f"storage buffer range of {context.name}", f"<= {most_bytes} bytes",
                 f"{scratch.nbytes} bytes")
    # Binding more storage buffers than the device allows a shader is undefined behaviour in
    # Vulkan (Vulkan guarantees 4; pyvkgrad's kernels bind up to 10): refuse it here.
    most = context.info.max_per_stage_descriptor_storage_buffers
    for d in plan.dispatches:
        if len(d.bindings) > most:
            fail(desc.OPERATOR, f"kernel {d.kernel}", f"binds more storage buffers than "
                 f"{context.name} allows a shader (maxPerStageDescriptorStorageBuffers)",
                 f"<= {most}", len(d.bindings), kind=RuntimeError)
    # Vulkan 1.1 promises only basic subgroup operations; BatchNorm's sums use arithmetic
    # (subgroupAdd), undefined behaviour where the device lacks it in compute shaders.
    info = context.info
    have = _vulkan_info.subgroup_feature_names(
        info.subgroup_operations if info.subgroup_stages & _vulkan_info.SHADER_STAGE_COMPUTE
        else 0)
    for d in plan.dispatches:
        need = kernels.interface(d.kernel).subgroup_features
        missing = [f for f in need if f not in have]
        if missing:
            fail(desc.OPERATOR, f"kernel {d.kernel}", f"uses subgroup operations that "
                 f"{context.name} lacks in compute shaders ({', '.join(missing)}; "
                 f"VkPhysicalDeviceSubgroupProperties)", ", ".join(need),
                 ", ".join(have) or "none", kind=RuntimeError)
    with context.lock:
        context.collect()
        session = context.session()
        # (rte16 only where the device was opened with its extensions, whatever limits a
        # caller passed)
        op = CompiledOperator(context, session, desc, plan, limits.float16_rte and all(
            e in session.runtime.extensions for e in _vulkan_info.RTE16_EXTENSIONS), limits)
        session.own(op)
        session.operators.add(op)
        return op


def _pipeline(d: Dispatch) -> Tuple[str, bytes, int]:
    """What makes dispatch d's pipeline: its kernel, its specialization's words and its
    workgroup count (the push constants are recorded with each dispatch)."""
    return d.kernel, kernels.specialization(d.kernel, d.constants).tobytes(), d.workgroups


def _tables(plan: Plan) -> list:
    """A plan's scratch buffers: names, sizes and the words of constant tables."""
    return [(s.name, s.nbytes, None if s.words is None else s.words.tobytes())
            for s in plan.scratch]


class CompiledOperator:
    """A descriptor compiled for one device: its plan, kernels and scratch buffers.

    Call it with device tensors named after the descriptor's tensor fields; it submits once.
    Pipelines bind particular buffers, so they are cached per bound-tensor set, and so is a
    recorded command buffer: calling again with the same tensors records nothing.
    `fields` (name -> (TensorDesc, access)) and `scratch` (name -> runtime buffer) are what a
    Recording binds.
    """

    def __init__(self, context: DeviceContext, session: Session, desc: OperatorDesc,
                 plan: Plan, rte16: bool, limits: Limits) -> None:
        self.device: Device = context.device
        self.desc: OperatorDesc = desc
        self.plan: Plan = plan
        self.limits: Limits = limits  # the plan's
        self.operator: str = desc.OPERATOR
        self.fields: Dict[str, Tuple[TensorDesc, str]] = dict(desc.tensor_fields())
        self.scratch: Dict[str, Buffer] = {}
        self._context = context
        self._lifetime = Lifetime(f"the compiled {self.operator} operator", session.lifetime)
        self._in_place = dict(desc.IN_PLACE)
        self._session = session
        self._programs: "collections.OrderedDict[tuple, Program]" = collections.OrderedDict()
        self._calls: "collections.OrderedDict[Any, Recording]" = collections.OrderedDict()
        runtime = session.runtime
        tables = []
        for s in plan.scratch:
            words = None
            if s.words is not None:
                words = np.zeros(buffer_words(s.nbytes), dtype=np.uint32)
                words[: s.words.size] = s.words
            buf = runtime.buffer(buffer_words(s.nbytes) * 4,
                                 "device" if words is None else "staged", words=words)
            self.scratch[s.name] = buf
            if words is not None:
                tables.append(buf)
        if tables:  # constant tables reach the device once, at compile time
            cmds = runtime.commands()
            cmds.upload(tables)
            cmds.submit(f"{self.operator} tables")
            cmds.destroy()
        # What makes a pipeline: dispatches that differ only in push constants (a loop or
        # buffer limit's slices of one pass: hundreds on a narrow device) share one, so that a
        # plan of many slices compiles each kernel once (lavapipe compiles a pipeline in about
        # 0.15 s). Specialization by its words: 0.0 and -0.0 are different pipelines.
        self._pipelines: Tuple[Tuple[str, bytes, int], ...] = tuple(
            _pipeline(d) for d in plan.dispatches)
        # rte16: where the device can fix its float16 conversions to round to nearest even,
        # the kernels that convert to float16 run their rte16 SPIR-V (the same bits, faster).
        self._rte16 = rte16
        for d in plan.dispatches:
            # load (and check) every kernel now, not at the first call
            kernels.spirv(d.kernel, self._rte16)

    def scalar_plan(self, desc: OperatorDesc) -> Optional[Plan]:
        """The plan of `desc` if it differs from this operator's descriptor only in scalars
        its kernels take as push constants: the same operator and tensor descriptors, and a
        plan (for this operator's limits) that dispatches the same kernels, specialization
        constants, workgroup counts and bindings, in order, over the same scratch buffers with
        the same constant tables (ResampleGrad's coordinates, say, uploaded at compile time).
        Else None."""
        fields = dict(desc.tensor_fields()) if type(desc) is type(self.desc) else None
        if fields != self.fields:
            return None
        plan = desc.plan(self.limits)
        same = len(plan.dispatches) == len(self.plan.dispatches) and all(
            _pipeline(d) == pipeline and d.bindings == old.bindings
            for d, pipeline, old in zip(plan.dispatches, self._pipelines, self.plan.dispatches))
        return plan if same and _tables(plan) == _tables(self.plan) else None

    @property
    def float16_rte(self) -> bool:
        """Whether its kernels that convert to float16 run their rte16 SPIR-V (the device
        rounds under RoundingModeRTE: Limits.float16_rte, on a runtime opened for it)."""
        return self._rte16

    @property
    def closed(self) -> bool:
        """Whether the operator, or its device's session, was closed."""
        return not self._lifetime.alive

    def check_open(self, action: str) -> None:
        """Raise ClosedError if the operator (or its device's session) is closed."""
        self._lifetime.check(action)

    def bind(self, tensors: Dict[str, DeviceTensor], action: str) -> Dict[str, DeviceTensor]:
        """Check that the bound tensors fit the descriptor and may share buffers as bound;
        raise before any device work."""
        self._lifetime.check(action)
        names = set(self.fields)
        if set(tensors) != names:
            missing = sorted(names - set(tensors))
            extra = sorted(set(tensors) - names)
            raise TypeError(f"{self.operator}: bind every tensor field by name: "
                            f"missing {missing}, unexpected {extra}")
        for name, tensor in tensors.items():
            desc, _ = self.fields[name]
            field = dml_name(name)
            if not isinstance(tensor, DeviceTensor):
                fail(self.operator, field, "must be bound to a DeviceTensor", "DeviceTensor",
                     type(tensor).__name__, TypeError)
            if tensor.device is not self.device:
                fail(self.operator, field, "is on another Device object (each has its own "
                     "Vulkan device, even for one GPU)", f"{self.device.name} (this operator's)",
                     tensor.device.name)
            tensor.storage.lifetime.check(f"{self.operator}: {field}")
            if tensor.desc.data_type != desc.data_type:
                fail(self.operator, field, "has the wrong data type", desc.data_type.name,
                     tensor.desc.data_type.name, TypeError)
            # The tensor's own elements, not its buffer: the buffer is rounded up to 16 bytes,
            # and an element in that padding is nothing the caller wrote or can read.
            need, have = desc.element_span, tensor.desc.element_span
            if have < need:
                fail(self.operator, field, "is bound to a buffer too small for its descriptor "
                     "(elements up to the last one addressed)", f">= {need} elements",
                     f"{have} elements")
        self._check_aliasing(tensors)
        return tensors

    def _check_aliasing(self, tensors: Mapping[str, DeviceTensor]) -> None:
        """One tensor in several fields: inputs may share; an output only over an input that
        the operator allows in place (`IN_PLACE`), with the identical descriptor."""
        shared = collections.defaultdict(list)
        for name, tensor in tensors.items():
            shared[id(tensor.storage)].append(name)
        for names in shared.values():
            written = [n for n in names if self.fields[n][1] != "read"]
            if len(names) < 2 or not written:
                continue
            out = written[0]
            if len(written) > 1:
                fail(self.operator, " and ".join(dml_name(n) for n in written),
                     "are outputs bound to one tensor", "a tensor per output", "one tensor")
            for other in names:
                if other == out:
                    continue
                allowed = other in self._in_place.get(out, ())
                same = self.fields[other][0] == self.fields[out][0]
                if not (allowed and same):
                    rule = ("may share a tensor only with an identical descriptor" if allowed
                            else "may not share a tensor with " + dml_name(other))
                    pairs = ", ".join(f"{dml_name(o)} with {dml_name(i)}"
                                      for o, ins in self._in_place.items() for i in ins)
                    fail(self.operator, f"{dml_name(out)} and {dml_name(other)}",
                         f"are bound to one tensor; {dml_name(out)} {rule}",
                         f"in place only {pairs or 'never'} (identical descriptors)",
                         f"{self.fields[out][0]} over {self.fields[other][0]}")

    def __call__(self, **tensors: DeviceTensor) -> None:
        """Run once on `tensors` (one submission)."""
        context = self._context
        with context.lock:
            context.collect()
            # The same tensors as a cached call passed `bind` before, and a tensor's data type
            # and size never change: only lifetimes can, and the recording checks them.
            try:
                key = tuple(id(tensors[name].storage) for name in self.fields)
            except (KeyError, AttributeError):
                key = None
            rec = self._calls.get(key) if len(tensors) == len(self.fields) else None
            if rec is not None:
                self._calls.move_to_end(key)
                rec.replay()
                return
            self.bind(tensors, f"{self.operator} operator call")
            rec = Recording(context)
            rec.execute(self, **tensors)
            with interrupts_deferred():
                rec.submit()
                self._calls[key] = rec
                while len(self._calls) > OPERATOR_CACHE_ENTRIES:
                    self._calls.popitem(last=False)[1].close()

    def program(self, index: int, buffers: Sequence[Buffer]) -> Program:
        """The pipeline of dispatch `index` bound to `buffers` (runtime Buffers), cached and
        shared with every dispatch of the same kernel, specialization, workgroup count and
        buffers (the push constants are recorded with each dispatch)."""
        self._lifetime.check(f"{self.operator} operator")
        key = (self._pipelines[index], tuple(id(b) for b in buffers))
        program = self._programs.get(key)
        if program is not None and program.alive:
            self._programs.move_to_end(key)
            return program
        d = self.plan.dispatches[index]
        program = self._session.runtime.program(
            buffers, kernels.spirv(d.kernel, self._rte16), d.workgroups,
            np.frombuffer(self._pipelines[index][1], dtype=np.uint32), len(d.push_constants))
        # The program holds its buffers, so their ids cannot be reused while it is cached.
        # Leaving the cache drops only the cache's reference: a recording may still use the
        # program, and Python frees it (its descriptor set; the runtime keeps the pipeline a while)
        # when the last user lets go.
        self._programs[key] = program
        while len(self._programs) > OPERATOR_CACHE_ENTRIES * len(self.plan.dispatches):
            self._programs.popitem(last=False)
        return program

    def forget(self, storage: TensorStorage) -> None:
        """Drop cached pipelines and calls that bind `storage` (its tensor was dropped)."""
        for key in [k for k, rec in self._calls.items() if rec.binds(storage)]:
            self._calls.pop(key).close()
        for key in [k for k, p in self._programs.items()
                    if any(b is storage.buffer for b in p.buffers)]:
            del self._programs[key]  # a recording that binds the tensor keeps its own reference

    def close(self) -> None:
        """Release the operator's pipelines and scratch now; recordings that use it, and
        calling it, raise ClosedError afterwards."""
        with self._context.lock:
            self._lifetime.close()
            for rec in self._calls.values():
                rec.close()
            self._calls.clear()
            for program in self._programs.values():
                program.destroy()
            self._programs.clear()
            for buf in self.scratch.values():
                buf.destroy()
            self.scratch.clear()

    def __enter__(self) -> "CompiledOperator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
