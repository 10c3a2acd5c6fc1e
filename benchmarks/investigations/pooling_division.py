#!/usr/bin/env python3
"""AVERAGE_POOLING_GRAD's division by a whole window's count (shaders/average_pooling_grad.comp,
div_count: q0 = |v| * RECIPROCAL, then the exact remainder picks q0's significand, one more or
one less), modelled in numpy for every count d from 3 to 128 that is not a power of two and
every float32 significand, at two exponents (the road is the same at every exponent where v
and q0 are normal and q0 is past the second binade, the kernel's condition): the model's bits
against the exact quotient correctly rounded (fractions where float64 and the model differ).
It also counts the steps down from a power of two (onto the finer units below it), which the
kernel takes as any other step.

    python3 benchmarks/investigations/pooling_division.py      (about 2 minutes, numpy only)
"""

from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from pyvkgrad.ops.average_pooling_grad import reciprocal_bits  # noqa: E402


def model(v_bits: np.ndarray, d: int) -> tuple:
    """The kernel's road on positive normal v: (result bits, whether it steps down from a power
    of two)."""
    reciprocal = np.uint32(reciprocal_bits(d)).view(np.float32)
    q0 = (v_bits.view(np.float32) * reciprocal).astype(np.float32)  # correctly rounded
    bits = q0.view(np.uint32).astype(np.int64)
    shift = (v_bits.astype(np.int64) >> 23) - (bits >> 23)
    assert shift.min() >= 0 and shift.max() <= 7, (d, shift.min(), shift.max())
    mq = (bits & 0x7FFFFF) | 0x800000
    r = (((v_bits.astype(np.int64) & 0x7FFFFF) | 0x800000) << shift) - mq * d
    up, down = 2 * r > d, 2 * r < -d
    return (bits + up - down).astype(np.uint32), down & (mq == 0x800000)


def main() -> None:
    significands = np.arange(0x800000, 0x1000000, dtype=np.uint32)
    wrong = steps_down = 0
    for d in range(3, 129):
        if d & (d - 1) == 0:
            continue
        for biased in (127, 200):
            v = (np.uint32(biased) << 23) | (significands & 0x7FFFFF)
            got, steps = model(v, d)
            # float64's quotient is within half a unit of float64's last place; rounded to
            # float32 it can differ from the correct rounding only near a half-way point:
            # those are settled exactly.
            near = (v.view(np.float32).astype(np.float64) / d).astype(np.float32).view(np.uint32)
            for i in np.flatnonzero(got != near):
                exact = Fraction(int(significands[i]), d) * Fraction(2) ** (biased - 150)
                best = min((int(got[i]), int(near[i])), key=lambda b: abs(
                    Fraction(float(np.uint32(b).view(np.float32))) - exact))
                if best != got[i]:
                    wrong += 1
                    print(f"d {d}: v {hex(int(v[i]))} gives {hex(int(got[i]))}, "
                          f"not {hex(best)}")
            steps_down += int(steps.sum())
    print(f"counts 3-128 (not powers of two), every significand at two exponents: {wrong} "
          f"wrong; {steps_down} steps down from a power of two among them")
    sys.exit(1 if wrong else 0)


if __name__ == "__main__":
    main()
