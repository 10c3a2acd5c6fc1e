"""What a record of the operator table is, and how results are compared with its oracle.

`Operator` (one record: descriptor, one-call function, oracle, case generator, tolerances and
what the generic tests need to speak about any operator), `Case`, `Tolerance`, and `compare` /
`assert_close`, which hold a device's outputs against the float64 oracle within a record's
tolerance. The table itself, one record per operator, is operators.py, which re-exports these.
Nothing here touches a device: importing it needs no Vulkan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import (TYPE_CHECKING, Any, Callable, Dict, Mapping, Optional, Sequence, Tuple,
                    Union)

import numpy as np
from numpy.typing import DTypeLike

from .tensor import DataType, TensorDesc

if TYPE_CHECKING:
    from .device import DeviceLike

# Arguments of the one-call functions that choose how, not what: the oracle has none of them.
EXECUTION_OPTIONS = ("device", "algorithm")
DTYPES = (np.float32, np.float16)


@dataclass(frozen=True)
class Tolerance:
    """Per element: |got - oracle| <= magnitude * M + value * |oracle| + absolute, where M is
    the record's `magnitude` of that element (the sum of the absolute terms it is made of,
    which bounds the rounding error of any summation order); `exact`: bitwise equal to the
    oracle rounded to the data type (NaNs and signed zeros included)."""

    magnitude: float = 0.0
    value: float = 0.0
    absolute: float = 0.0
    exact: bool = False

    def bound(self, want: np.ndarray, magnitude: Optional[np.ndarray]) -> np.ndarray:
        bound = self.value * np.abs(want) + self.absolute
        if self.magnitude:
            bound = bound + self.magnitude * magnitude
        return bound


EXACT = Tolerance(exact=True)


@dataclass(frozen=True)
class Case:
    """One call: `args` and `kwargs` go to the function and to the oracle, `options` to the
    function only (EXECUTION_OPTIONS); `label` says what it is, for messages and the demo."""

    args: Tuple[Any, ...]
    kwargs: Dict[str, Any] = field(default_factory=dict)
    options: Dict[str, Any] = field(default_factory=dict)
    label: str = ""


def packed(array: np.ndarray) -> TensorDesc:
    """The descriptor of a case's array: its data type and sizes, packed strides."""
    return TensorDesc(DataType.from_numpy(array.dtype, "", "", DataType), np.shape(array))


@dataclass(frozen=True)
class Operator:
    """One operator's record (see the module docstring)."""

    name: str  # DirectML's name in snake_case: module, function, oracle and kernels share it
    descriptor: type
    function: Callable
    oracle: Callable
    make_case: Callable[[np.random.Generator, Tuple[int, ...], type], Case]
    tolerance: Mapping[str, Tolerance]  # by numpy dtype name, one per entry of `dtypes`
    describe: Callable[[Case], object]
    call: Callable[[object, Dict[str, np.ndarray]], Tuple[tuple, dict]]
    max_rank: int = 8
    min_rank: int = 1  # the operator's tensors take min_rank to max_rank dimensions
    magnitude: Optional[Callable[[tuple, dict], Sequence[np.ndarray]]] = None
    # field -> (valid values, invalid values), for a descriptor of `rank` dimensions
    parameter_examples: Callable[[int], Dict[str, Tuple[list, list]]] = lambda rank: {}
    demo_shape: Tuple[int, ...] = (8, 64, 56, 56)
    # The data types make_case takes (the tests and the demo run each).
    dtypes: Tuple[type, ...] = DTYPES

    @property
    def OPERATOR(self) -> str:
        return self.descriptor.OPERATOR

    @property
    def independent_axes(self) -> str:
        """The axes the one-call function may cut along (descriptor.independent_axes())."""
        return self.descriptor.INDEPENDENT_AXES

    def tolerance_for(self, dtype: DTypeLike) -> Tolerance:
        return self.tolerance[np.dtype(dtype).name]

    def run(self, case: Case, device: DeviceLike = None) -> Tuple[np.ndarray, ...]:
        """The one-call function on `case`, its outputs as a tuple."""
        return _outputs(self.function(*case.args, **case.kwargs, **case.options, device=device))

    def expected(self, case: Case) -> Tuple[np.ndarray, ...]:
        return _outputs(self.oracle(*case.args, **case.kwargs))

    def magnitudes(self, args: Tuple[Any, ...], kwargs: Dict[str, Any]
                   ) -> Optional[Tuple[np.ndarray, ...]]:
        """Per output, the magnitude its tolerance is relative to (None: no such tolerance)."""
        return None if self.magnitude is None else tuple(self.magnitude(args, kwargs))


# What an operator returns: one array, or a tuple of them (the BatchNorm grads), in which an
# output not asked for is None (ROI_ALIGN_GRAD's dROI).
Outputs = Union[np.ndarray, Sequence[Optional[np.ndarray]]]


def _outputs(result: Outputs) -> Tuple[np.ndarray, ...]:
    """The arrays of a result, the outputs not asked for (None) left out."""
    if isinstance(result, np.ndarray):
        return (result,)
    return tuple(r for r in result if r is not None)


# ---- comparing with the oracle -------------------------------------------------------------------

def compare(record: Operator, got: Outputs, want: Outputs,
            magnitudes: Optional[Sequence[np.ndarray]], dtype: DTypeLike,
            tolerance: Optional[Tolerance] = None) -> Tuple[float, str]:
    """(worst error as a fraction of the tolerance, what went wrong or ""): shape, then dtype,
    then values of each output in turn, naming the output. A fraction above 1 fails."""
    tolerance = tolerance or record.tolerance_for(dtype)
    got, want = _outputs(got), _outputs(want)
    if len(got) != len(want):
        return math.inf, f"{record.name}: {len(got)} outputs, expected {len(want)}"
    magnitudes = (None,) * len(want) if magnitudes is None else magnitudes
    worst = 0.0
    for i, (g, w, m) in enumerate(zip(got, want, magnitudes)):
        what = f"{record.name} output {i}"
        if g.shape != np.shape(w):
            return math.inf, f"{what}: shape {g.shape}, expected {np.shape(w)}"
        if g.dtype != np.dtype(dtype):
            return math.inf, f"{what}: dtype {g.dtype}, expected {np.dtype(dtype)}"
        if tolerance.exact:
            bits = np.dtype(f"u{g.dtype.itemsize}")  # the unsigned type of its size
            bad = g.view(bits) != np.asarray(w).astype(g.dtype).view(bits)
            if bad.any():
                first = tuple(np.argwhere(bad)[0])
                return math.inf, (f"{what}: {bad.sum()} of {bad.size} elements differ in their "
                                  f"bits, first at {first}: got {g[first]!r}, expected "
                                  f"{np.asarray(w)[first]!r}")
            continue
        with np.errstate(invalid="ignore"):
            err = np.abs(g.astype(np.float64) - w)
            # NaN where the oracle has NaN (a negative variance, a non-finite input) matches.
            err[np.isnan(err) & np.isnan(g) & np.isnan(w)] = 0.0
            bound = tolerance.bound(w, m)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(err == 0, 0.0, err / bound)
        bad = ~((err == 0) | (err <= bound))
        if bad.any():
            first = tuple(np.argwhere(bad)[0])
            return math.inf, (f"{what}: {bad.sum()} of {bad.size} elements beyond tolerance, "
                              f"first at {first}: got {g[first]!r}, expected {w[first]!r} "
                              f"(tolerance {bound[first]!r})")
        worst = max(worst, float(np.max(ratio, initial=0.0)))
    return worst, ""


def assert_close(record: Operator, got: Outputs, args: Tuple[Any, ...], kwargs: Dict[str, Any],
                 dtype: DTypeLike, tolerance: Optional[Tolerance] = None) -> None:
    """Raise AssertionError unless `got` matches the oracle on (args, kwargs) within the
    record's tolerance for `dtype` (or `tolerance`)."""
    want = _outputs(record.oracle(*args, **kwargs))
    _, problem = compare(record, got, want, record.magnitudes(args, kwargs), dtype, tolerance)
    if problem:
        raise AssertionError(problem)
