"""DirectML buffer tensor descriptors and the checks every operator shares.

`TensorDesc` mirrors `DML_BUFFER_TENSOR_DESC` (docs/semantics.md §1): a data type, sizes (outermost
first) and optional element strides (0 broadcasts, larger than packed pads). Operators validate
their descriptors with the helpers here so that every message has one shape:

    ACTIVATION_RELU_GRAD: InputGradientTensor.Sizes must equal InputTensor.Sizes: expected (2, 3), got (2, 4)
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any, Iterable, List, NoReturn, Optional, Sequence, Tuple, Type

import numpy as np
from numpy.typing import DTypeLike

from ._copy import copy_of

MAX_DIMENSIONS = 8  # DML_TENSOR_DIMENSION_COUNT_MAX1
MAX_ELEMENTS = 2**32 - 1  # a DirectML buffer tensor may not exceed 2^32 - 1 elements
MAX_UINT = 2**32 - 1  # sizes and strides are DirectML UINTs
EXACT_OVERLAP_CHECK_MAX = 1 << 22  # elements up to which has_overlap enumerates offsets
BUFFER_ALIGNMENT = 16  # device buffers are allocated in 16-byte units (vectorised kernels read uvec4)


class DataType(enum.IntEnum):
    """`DML_TENSOR_DATA_TYPE` values pyvkgrad supports (same numbers as DirectML): the float
    types, and the integer types of the operators that take them (RANDOM_GENERATOR: UINT32;
    ELEMENT_WISE_CLIP_GRAD*: all); 64-bit types are not supported."""

    FLOAT32 = 1
    FLOAT16 = 2
    UINT32 = 3
    UINT16 = 4
    UINT8 = 5
    INT32 = 6
    INT16 = 7
    INT8 = 8

    @property
    def numpy_dtype(self) -> np.dtype:
        return np.dtype(_NUMPY_TYPES[self])

    @property
    def element_size(self) -> int:
        return self.numpy_dtype.itemsize

    @property
    def is_float(self) -> bool:
        return self in FLOAT_TYPES

    @classmethod
    def from_numpy(cls, dtype: DTypeLike, operator: str, field: str,
                   allowed: Optional[Iterable["DataType"]] = None) -> "DataType":
        """The data type of numpy `dtype`, one of `allowed` (default FLOAT_TYPES: an array
        handed to a float operator is refused here, before its descriptor is built)."""
        allowed = FLOAT_TYPES if allowed is None else tuple(allowed)
        dtype = np.dtype(dtype)
        for data_type in allowed:
            if dtype == data_type.numpy_dtype:
                return data_type
        names = [t.numpy_dtype.name for t in allowed]
        expected = " or ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
        raise TypeError(f"{operator}: {field} has unsupported dtype: expected {expected}, "
                        f"got {dtype}")


# DirectML's numbers of the data types above (checks of a DataType given as a number).
DATA_TYPE_VALUES = frozenset(int(d) for d in DataType)


_NUMPY_TYPES = {DataType.FLOAT32: np.float32, DataType.FLOAT16: np.float16,
                DataType.UINT32: np.uint32, DataType.UINT16: np.uint16, DataType.UINT8: np.uint8,
                DataType.INT32: np.int32, DataType.INT16: np.int16, DataType.INT8: np.int8}
# The float operators' data types (all but RANDOM_GENERATOR and the clip grads:
# check_float_type).
FLOAT_TYPES = (DataType.FLOAT32, DataType.FLOAT16)


def fail(operator: str, field: str, rule: str, expected: object, actual: object,
         kind: Type[Exception] = ValueError) -> NoReturn:
    """Raise `kind` with the message shape every pyvkgrad check uses."""
    raise kind(f"{operator}: {field} {rule}: expected {expected}, got {actual}")


def dml_name(field: str) -> str:
    """input_gradient_tensor -> InputGradientTensor, alpha -> Alpha, roi_tensor -> ROITensor
    (DirectML's field names)."""
    return "".join(part.upper() if part == "roi" else part.capitalize()
                   for part in field.split("_"))


def real_number(operator: str, field: str, value: object) -> float:
    """A number field's value as a Python float. A finite value beyond float64's range (a huge
    int, a long double), which float() raises on or turns into Inf, is refused, naming the
    operator and the field."""
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if math.isinf(number) and not (isinstance(value, (float, np.floating))
                                   and np.isinf(value)):
        shown = repr(value)
        fail(operator, field, "must be within float32's range", "|value| <= 3.4e38",
             shown if len(shown) <= 40 else f"{shown[:20]}...({len(shown)} digits)")
    return number


def check_float(operator: str, field: str, value: object, non_negative: bool = False) -> float:
    """A DirectML FLOAT field: a real number (not a bool), finite in float32 (and >= 0 with
    `non_negative`), returned as a Python float."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer,
                                                                     np.floating)):
        fail(operator, field, "must be a number", "float", type(value).__name__, TypeError)
    number = real_number(operator, field, value)
    with np.errstate(over="ignore"):
        if not (math.isfinite(number) and np.isfinite(np.float32(number))) or \
                (non_negative and number < 0):
            if non_negative:
                fail(operator, field, "must be finite and non-negative (in float32)",
                     f"0 <= {field} <= 3.4e38", number)
            fail(operator, field, "must be finite (in float32)", f"|{field}| <= 3.4e38", number)
    return number


def enum_value(operator: str, enum_cls, value, field: str, allowed: str):
    """A DirectML enum field: the member from a member, its int value or its lower-case name
    (InterpolationMode.LINEAR, 1 or "linear")."""
    if isinstance(value, enum_cls):
        return value
    if isinstance(value, str):
        try:
            return enum_cls[value.upper()]
        except KeyError:
            fail(operator, field, "is not supported", allowed, repr(value))
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        try:
            return enum_cls(int(value))
        except ValueError:
            fail(operator, field, "is not supported", allowed, repr(value))
    fail(operator, field, "must be a string or an enum value", allowed, type(value).__name__,
         TypeError)


def packed_strides(sizes: Sequence[int]) -> Tuple[int, ...]:
    """Row-major element strides, last dimension fastest (DirectML's null strides)."""
    strides = [1] * len(sizes)
    for d in range(len(sizes) - 2, -1, -1):
        strides[d] = strides[d + 1] * sizes[d + 1]
    return tuple(strides)


def as_uint_tuple(values: object, operator: str, field: str) -> Tuple[int, ...]:
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        fail(operator, field, "must be a sequence of integers", "a sequence", type(values).__name__,
             TypeError)
    out = []
    for v in values:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            fail(operator, field, "must hold integers", "int", type(v).__name__, TypeError)
        if v < 0:
            fail(operator, field, "must not be negative", ">= 0", int(v))
        out.append(int(v))
    return tuple(out)


@dataclass(frozen=True)
class TensorDesc:
    """`DML_BUFFER_TENSOR_DESC`: data_type, sizes and element strides (None = packed).

    Element (i_0..i_{n-1}) lives at element offset sum(i_d * strides[d]); a stride of 0
    broadcasts. The buffer must hold at least `total_tensor_size_in_bytes` bytes
    (`DMLCalcBufferTensorSize`: (last index + 1) * element size, rounded up to 4).
    """

    data_type: DataType
    sizes: Tuple[int, ...]
    strides: Optional[Tuple[int, ...]] = None

    def __post_init__(self) -> None:
        self.validate("TensorDesc", "TensorDesc")

    def validate(self, operator: str, field: str) -> None:
        if not isinstance(self.data_type, DataType):
            # DataType's numbers are DirectML's; a bool or a float is not a data type.
            value = self.data_type
            if (isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
                    and int(value) in DATA_TYPE_VALUES):
                object.__setattr__(self, "data_type", DataType(int(value)))
            else:
                fail(operator, f"{field}.DataType", "is not supported",
                     "a DataType (" + ", ".join(t.name for t in DataType) + ")", repr(value),
                     TypeError)
        sizes = as_uint_tuple(self.sizes, operator, f"{field}.Sizes")
        object.__setattr__(self, "sizes", sizes)
        if not 1 <= len(sizes) <= MAX_DIMENSIONS:
            fail(operator, f"{field}.DimensionCount", "is out of range", f"1 to {MAX_DIMENSIONS}",
                 len(sizes))
        if min(sizes) == 0:
            fail(operator, f"{field}.Sizes", "must all be at least 1", ">= 1", sizes)
        if self.strides is not None:
            strides = as_uint_tuple(self.strides, operator, f"{field}.Strides")
            object.__setattr__(self, "strides", strides)
            if len(strides) != len(sizes):
                fail(operator, f"{field}.Strides", "must have one entry per dimension",
                     len(sizes), len(strides))
            if max(strides) > MAX_UINT:
                fail(operator, f"{field}.Strides", "must fit DirectML's UINT",
                     f"<= {MAX_UINT}", max(strides))
        if max(sizes) > MAX_UINT:
            fail(operator, f"{field}.Sizes", "must fit DirectML's UINT", f"<= {MAX_UINT}",
                 max(sizes))
        if self.element_count > MAX_ELEMENTS:
            fail(operator, f"{field}.Sizes", "hold too many elements", f"<= {MAX_ELEMENTS}",
                 self.element_count)

    @property
    def rank(self) -> int:
        return len(self.sizes)

    @property
    def element_strides(self) -> Tuple[int, ...]:
        return self.strides if self.strides is not None else packed_strides(self.sizes)

    @property
    def element_count(self) -> int:
        return math.prod(self.sizes)

    @property
    def element_span(self) -> int:
        """Elements from the first to one past the last addressed element."""
        return sum((s - 1) * st for s, st in zip(self.sizes, self.element_strides)) + 1

    @property
    def total_tensor_size_in_bytes(self) -> int:
        """DirectML's minimum buffer size (`DMLCalcBufferTensorSize`), a multiple of 4."""
        nbytes = self.element_span * self.data_type.element_size
        return (nbytes + 3) // 4 * 4

    @property
    def is_packed(self) -> bool:
        return self.element_strides == packed_strides(self.sizes)

    def has_overlap(self) -> bool:
        """True when two logical elements share memory (a zero stride, or strides that alias).

        Outputs must not overlap: several results would race for one cell (docs/semantics.md
        §6.13). Exact: when,
        sorting dimensions by stride, each stride exceeds the reach of the smaller ones, no
        two elements meet; otherwise the offsets are enumerated (sizes (3, 2) with strides
        (2, 3) address 0, 3, 2, 5, 4, 7: distinct). Beyond EXACT_OVERLAP_CHECK_MAX elements
        such a layout is reported as overlapping (conservative).
        """
        dims = [(size, stride) for size, stride in zip(self.sizes, self.element_strides)
                if size > 1]
        if any(stride == 0 for _, stride in dims):
            return True
        reach = 0
        for size, stride in sorted(dims, key=lambda p: p[1]):
            if stride <= reach:
                break
            reach += (size - 1) * stride
        else:
            return False
        if self.element_count > EXACT_OVERLAP_CHECK_MAX:
            return True
        offsets = np.zeros(1, dtype=np.int64)
        for size, stride in dims:
            offsets = (offsets[:, None] + np.arange(size, dtype=np.int64) * stride).ravel()
        return np.unique(offsets).size != offsets.size

    def with_sizes(self, sizes: Sequence[int]) -> "TensorDesc":
        return TensorDesc(self.data_type, tuple(sizes), None)


def check_desc(operator: str, field: str, desc: object) -> TensorDesc:
    """The descriptor field is a TensorDesc (re-validated with the operator's name)."""
    if not isinstance(desc, TensorDesc):
        fail(operator, field, "must be a TensorDesc", "TensorDesc", type(desc).__name__, TypeError)
    desc.validate(operator, field)
    return desc


def check_same(operator: str, attr: str, reference: Tuple[str, TensorDesc],
               *others: Tuple[str, TensorDesc]) -> None:
    """Every `others` descriptor has the same `attr` ("data_type" or "sizes") as `reference`."""
    label = {"data_type": "DataType", "sizes": "Sizes"}[attr]
    ref_name, ref = reference
    for name, desc in others:
        if getattr(desc, attr) != getattr(ref, attr):
            fail(operator, f"{name}.{label}", f"must equal {ref_name}.{label}",
                 _show(getattr(ref, attr)), _show(getattr(desc, attr)),
                 TypeError if attr == "data_type" else ValueError)


def check_float_type(operator: str, field: str, desc: TensorDesc) -> None:
    """A float operator's tensor: FLOAT32 or FLOAT16 (DataType also holds the integer types
    of RANDOM_GENERATOR and the clip grads)."""
    if desc.data_type not in FLOAT_TYPES:
        fail(operator, f"{field}.DataType", "must be a float type", "FLOAT32 or FLOAT16",
             desc.data_type.name, TypeError)


def check_rank(operator: str, field: str, desc: TensorDesc, low: int, high: int) -> None:
    if not low <= desc.rank <= high:
        fail(operator, f"{field}.DimensionCount", "is out of range", f"{low} to {high}", desc.rank)


def check_output(operator: str, field: str, desc: TensorDesc) -> None:
    """Outputs may not alias themselves (zero or overlapping strides)."""
    if desc.has_overlap():
        fail(operator, f"{field}.Strides", "must not make output elements overlap",
             "non-overlapping strides", desc.element_strides)


def _show(value: object) -> object:
    return value.name if isinstance(value, DataType) else value


def coalesce(sizes: Sequence[int], *strides_list: Sequence[int]
             ) -> Tuple[Tuple[int, ...], List[Tuple[int, ...]]]:
    """Merge dimensions that every tensor walks contiguously and drop size-1 dimensions.

    Returns (sizes, [strides per tensor]) of the smallest rank (at least 1) addressing the
    same elements in the same order: fewer index divisions in element-wise kernels, and a
    fully packed trio becomes rank 1 with stride 1 (the vectorised fast path).
    """
    dims = [(s, [st[d] for st in strides_list]) for d, s in enumerate(sizes) if s != 1]
    merged = []
    for size, strides in dims:
        if merged:
            psize, pstrides = merged[-1]
            if all(ps == st * size for ps, st in zip(pstrides, strides)):
                merged[-1] = (psize * size, strides)
                continue
        merged.append((size, strides))
    if not merged:
        merged = [(1, [1 for _ in strides_list])]
    return (tuple(s for s, _ in merged),
            [tuple(st[i] for _, st in merged) for i in range(len(strides_list))])


# ---- numpy arrays <-> buffer words -------------------------------------------------------------

def check_numpy(array: object, operator: str, field: str) -> np.ndarray:
    """`array` is a plain numpy array (a masked array is refused: its mask would be lost)."""
    if isinstance(array, np.ma.MaskedArray):
        fail(operator, field, "is a masked array, whose mask pyvkgrad cannot honour",
             "a plain numpy.ndarray (e.g. array.filled(0))", "numpy.ma.MaskedArray", TypeError)
    if not isinstance(array, np.ndarray):
        fail(operator, field, "must be a numpy array", "numpy.ndarray", type(array).__name__,
             TypeError)
    return array


def check_array(array: object, desc: "TensorDesc", operator: str, field: str) -> np.ndarray:
    """`array` has exactly `desc`'s dtype and sizes (no silent cast or reshape)."""
    check_numpy(array, operator, field)
    if array.dtype != desc.data_type.numpy_dtype:
        fail(operator, f"{field}.dtype", "must be the tensor's data type",
             desc.data_type.numpy_dtype, array.dtype, TypeError)
    if tuple(array.shape) != desc.sizes:
        fail(operator, f"{field}.shape", "must equal the tensor's sizes", desc.sizes,
             tuple(array.shape))
    return array


def named_desc(operator: str, field: str, data_type: "DataType", sizes: Sequence[int],
               strides: Optional[Sequence[int]] = None) -> "TensorDesc":
    """TensorDesc(data_type, sizes, strides), whose refusal names the operator and the field
    (a one-call function's own arrays and outputs; TensorDesc alone can name neither)."""
    try:
        return TensorDesc(data_type, tuple(sizes), None if strides is None else tuple(strides))
    except (ValueError, TypeError) as e:
        prefix = "TensorDesc: TensorDesc"
        if str(e).startswith(prefix):
            raise type(e)(f"{operator}: {field}{str(e)[len(prefix):]}") from None
        raise


def array_desc(array: np.ndarray, operator: str, field: str, max_bytes: Optional[int] = None,
               data_types: Optional[Iterable["DataType"]] = None
               ) -> Tuple["TensorDesc", np.ndarray]:
    """Describe a numpy array as (TensorDesc, elements) without copying anything yet.

    `elements` is a 1-D read-only view of the memory the descriptor addresses (element 0 at
    offset 0). Non-contiguous views and broadcast views (zero strides) keep their element
    strides, so a broadcast input uploads only its distinct elements. Negative or
    non-element-multiple strides, views that address far more than they use, and views whose
    span would exceed `max_bytes` where the packed elements would not, fall back to a packed
    copy. `data_types`: those the array may have (default FLOAT_TYPES).
    """
    check_numpy(array, operator, field)
    data_type = DataType.from_numpy(array.dtype, operator, field, data_types)
    if array.ndim == 0:
        array = array.reshape(1)
    if not 1 <= array.ndim <= MAX_DIMENSIONS:
        fail(operator, f"{field}.DimensionCount", "is out of range", f"1 to {MAX_DIMENSIONS}",
             array.ndim)
    if array.size == 0:
        fail(operator, f"{field}.Sizes", "must all be at least 1", ">= 1", array.shape)
    item = array.itemsize
    byte_strides = array.strides
    strided_ok = all(s >= 0 and s % item == 0 for s in byte_strides)
    strides = tuple(s // item for s in byte_strides) if strided_ok else None
    if strides == packed_strides(array.shape):
        strides = None  # packed: the fast kernels and the plain copy apply
    if strided_ok:
        desc = named_desc(operator, field, data_type, array.shape, strides)
        # A view that addresses far more memory than it uses is cheaper packed.
        if desc.element_span > 2 * array.size + 64:
            strided_ok = False
        elif max_bytes is not None and buffer_words(desc.total_tensor_size_in_bytes) * 4 > \
                max_bytes:
            strided_ok = False
    if not strided_ok:
        array = np.ascontiguousarray(array)
        desc = named_desc(operator, field, data_type, array.shape)
    span = np.lib.stride_tricks.as_strided(array, shape=(desc.element_span,), strides=(item,),
                                           writeable=False)
    return desc, span


def elements_of(array: np.ndarray, desc: "TensorDesc") -> np.ndarray:
    """The 1-D elements of `array` that `desc` (made by `array_desc` for an array of this
    layout) addresses: the array itself when packed (a packed copy when `array_desc` chose
    one), else a read-only view of the span its strides walk."""
    if desc.strides is None:
        return np.ascontiguousarray(array).reshape(-1)
    return np.lib.stride_tricks.as_strided(array, shape=(desc.element_span,),
                                           strides=(array.itemsize,), writeable=False)


def words_to_array(words: np.ndarray, desc: TensorDesc) -> np.ndarray:
    """Gather the logical elements of `desc` out of buffer words into a packed array."""
    elements = words.view(desc.data_type.numpy_dtype)
    if desc.strides is None:
        return copy_of(elements[: desc.element_count]).reshape(desc.sizes)
    item = desc.data_type.element_size
    view = np.lib.stride_tricks.as_strided(
        elements, shape=desc.sizes, strides=tuple(s * item for s in desc.element_strides))
    return np.array(view, copy=True)


def buffer_words(nbytes: int) -> int:
    """uint32 words of a device buffer of at least `nbytes` bytes (16-byte units)."""
    return max(1, -(-nbytes // BUFFER_ALIGNMENT)) * (BUFFER_ALIGNMENT // 4)
