"""Device tensors: a buffer holding a tensor laid out by a TensorDesc, with its staging copy.

What a tensor is made of (`TensorStorage`: buffer, which copy is current, lifetime) is kept
apart from the `DeviceTensor` the caller holds, so that recordings and caches keep the storage
and never keep a tensor alive that its caller dropped: when a DeviceTensor is collected, its
device's caches let go of its storage at the next call (`DeviceContext.forget`).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Optional, Tuple

import numpy as np

from ._context import DeviceContext
from ._copy import copy_into
from ._environment import interrupts_deferred
from ._state import Current, Lifetime, OneCopy, TensorState
from .runtime import Buffer, Commands
from .tensor import TensorDesc, buffer_words, check_array, fail, words_to_array

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

    from .device import Device


class TensorStorage:
    """A device tensor's buffer (with staging), which copy is current, and whether it is
    still open."""

    __slots__ = ("desc", "buffer", "state", "lifetime", "_download", "__weakref__")

    def __init__(self, desc: TensorDesc, buffer: Buffer, lifetime: Lifetime) -> None:
        self.desc: TensorDesc = desc
        self.buffer: Buffer = buffer
        self.lifetime: Lifetime = lifetime
        # Staging holds the contents (zeros or data); a mapped buffer is its own staging; a
        # device buffer has no host copy (kernels alone use it: nothing to move either way).
        self.state: TensorState = (OneCopy() if buffer.kind in ("mapped", "device")
                                   else TensorState(Current.HOST))
        # A cached command buffer that copies the device copy back.
        self._download: Optional[Commands] = None

    def host_words(self, action: str) -> np.ndarray:
        """Staging words holding the current contents (downloading first if need be)."""
        self.lifetime.check(action)
        if self.buffer.kind == "device":
            raise RuntimeError(f"{action}: a device-only tensor has no host copy")
        if self.state.needs_download:
            if self._download is None:
                self._download = self.buffer.runtime.commands()
                self._download.download([self.buffer])
            with interrupts_deferred():
                self._download.submit("read back")
                self.state.downloaded()
        return self.buffer.words()

    def write_elements(self, elements: np.ndarray) -> None:
        """The one-call path's write: `elements`, the 1-D span `array_desc` made for this
        descriptor, into the host-visible words (the caller checked the lifetime)."""
        copy_into(self.buffer.words().view(elements.dtype)[: elements.size], elements)
        self.state.host_written()

    def overwritten_elements(self, action: str) -> np.ndarray:
        """The host-visible elements (a view of the staging words, of the tensor's dtype),
        marked newer than the device copy: the caller, holding the lock, writes every element
        its descriptor covers before the next submission (the bridge's Adam fills its packed
        parameters and gradients there with one copy each step)."""
        self.lifetime.check(action)
        elements = self.buffer.words().view(self.desc.data_type.numpy_dtype)
        self.state.host_written()
        return elements

    def close(self) -> None:
        """Mark the tensor closed and destroy its buffer."""
        self.lifetime.close()
        if self._download is not None:
            self._download.destroy()
        self.buffer.destroy()


def _forget(context: "weakref.ref[DeviceContext]", storage: TensorStorage) -> None:
    """A DeviceTensor's finalizer: its context, if still alive, notes the storage dropped."""
    alive = context()
    if alive is not None:
        alive.forget(storage)


def make_tensor(context: DeviceContext, desc: TensorDesc, kind: str = "staged") -> "DeviceTensor":
    """A new tensor of `desc` holding zeros, in a buffer of `kind` (runtime.py: "staged";
    "mapped" where the host writes device memory directly; "device" for what only kernels use,
    such as a chain's intermediates: no host copy, contents undefined until a kernel writes
    them)."""
    nbytes = buffer_words(desc.total_tensor_size_in_bytes) * 4
    if nbytes > context.max_buffer_bytes:
        fail("Device", f"tensor {desc.sizes}", "exceeds the device's maximum storage buffer "
             "range", f"<= {context.max_buffer_bytes} bytes", f"{nbytes} bytes")
    with context.lock:
        context.collect()
        session = context.session()
        storage = TensorStorage(desc, session.runtime.buffer(nbytes, kind),
                                Lifetime(f"the DeviceTensor {desc.sizes}", session.lifetime))
        tensor = DeviceTensor(context, storage)
        session.own(storage)
        return tensor


class DeviceTensor:
    """A device buffer holding a tensor laid out by `desc` (packed or strided).

    Made by `Device.upload` (a copy of an array) or `Device.empty` (zeros). `write` replaces
    the contents, `numpy` reads them; both go through host-visible staging memory, and the
    copies between staging and the device happen as part of the next submission that needs
    them. `storage` is what recordings and caches keep (see the module's docstring).
    """

    def __init__(self, context: DeviceContext, storage: TensorStorage) -> None:
        self.device: Device = context.device
        self.storage: TensorStorage = storage
        self._context = context
        # When the caller drops this tensor, caches holding its storage let it go. The
        # finalizer holds the context weakly: the registry of finalizers would otherwise keep
        # the context, its device and the one-call cache's tensors alive, and a dropped Device
        # that had run a one-call function would never be freed.
        weakref.finalize(self, _forget, weakref.ref(context), storage)

    @property
    def desc(self) -> TensorDesc:
        """The tensor's layout: data type, sizes and element strides."""
        return self.storage.desc

    @property
    def nbytes(self) -> int:
        """Bytes of the device buffer (the descriptor's size rounded up to 16)."""
        return self.storage.buffer.nbytes

    @property
    def shape(self) -> Tuple[int, ...]:
        """The descriptor's sizes."""
        return self.desc.sizes

    @property
    def dtype(self) -> np.dtype:
        """float32 or float16, as a numpy dtype."""
        return self.desc.data_type.numpy_dtype

    @property
    def closed(self) -> bool:
        """Whether the tensor, or its device's session, was closed."""
        return not self.storage.lifetime.alive

    def numpy(self) -> np.ndarray:
        """The tensor's elements as a new packed numpy array."""
        with self._context.lock:
            words = self.storage.host_words("DeviceTensor.numpy")
            return words_to_array(words, self.desc)

    def __array__(self, dtype: "DTypeLike" = None, copy: Optional[bool] = None) -> np.ndarray:
        if copy is False:
            raise ValueError("DeviceTensor: the elements live in device memory; numpy needs a "
                             "copy (np.asarray(t) or t.numpy())")
        out = self.numpy()
        return out if dtype is None else out.astype(dtype, copy=False)

    def __dlpack__(self, stream: Any = None) -> Any:
        """DLPack of a host copy (never of device or staging memory, which may be freed)."""
        return self.numpy().__dlpack__()

    def __dlpack_device__(self) -> Tuple[int, int]:
        return (1, 0)  # kDLCPU: the capsule holds a host copy

    def write(self, array: np.ndarray) -> None:
        """Replace the contents with `array` (the tensor's dtype and shape; copied; a 0-d array
        for a {1} tensor, as `Device.upload` made it). The next operator call or replay that
        binds the tensor uploads it."""
        if isinstance(array, np.ndarray) and array.ndim == 0 and self.desc.sizes == (1,):
            array = array.reshape(1)
        array = check_array(array, self.desc, "DeviceTensor.write", "array")
        with self._context.lock:
            storage = self.storage
            storage.lifetime.check("DeviceTensor.write")
            desc = storage.desc
            item = desc.data_type.element_size
            strides = tuple(s * item for s in desc.element_strides)
            if desc.has_overlap():
                trial = np.zeros(desc.element_span, desc.data_type.numpy_dtype)
                placed = np.lib.stride_tricks.as_strided(trial, desc.sizes, strides)
                placed[...] = array
                if not np.array_equal(placed, array, equal_nan=True):
                    fail("DeviceTensor.write", "array", "must hold equal values where the "
                         "descriptor's elements share memory (zero or overlapping strides)",
                         "equal values", "different values")
            # Elements outside the descriptor keep their values: if a kernel wrote the device
            # copy since, fetch it first (unless the descriptor covers every byte).
            covers = desc.is_packed and desc.element_count * item == storage.buffer.nbytes
            words = (storage.buffer.words() if covers
                     else storage.host_words("DeviceTensor.write"))
            np.lib.stride_tricks.as_strided(words.view(desc.data_type.numpy_dtype),
                                            desc.sizes, strides)[...] = array
            storage.state.host_written()

    def close(self) -> None:
        """Release the device memory now (it is also released when garbage-collected);
        using the tensor afterwards raises ClosedError."""
        with self._context.lock:
            self.storage.close()

    def __enter__(self) -> "DeviceTensor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else self.storage.state.current.value + " current"
        return (f"DeviceTensor({self.desc.data_type.name}, sizes={self.desc.sizes}, "
                f"strides={self.desc.strides}, device={self.device.name!r}, {state})")
