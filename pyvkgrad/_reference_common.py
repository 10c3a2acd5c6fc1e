"""What the float64 oracles' modules share (pyvkgrad/reference.py holds the oracles' overview
and re-exports every one): inputs as float64, and an enum field given as a name or as
DirectML's enum member."""

import enum
from typing import Union

import numpy as np

# An interpolation mode or rounding direction: its name, or DirectML's enum member.
Named = Union[str, enum.Enum]


def _f64(x):
    return np.asarray(x, dtype=np.float64)


def _name(value):
    """An interpolation mode or rounding direction as its lower-case name: the one-call
    functions take DirectML's enum members (InterpolationMode.LINEAR) as well as strings."""
    name = getattr(value, "name", value)
    return name.lower() if isinstance(name, str) else name
