#!/usr/bin/env python3
"""AVERAGE_POOLING_GRAD's division by a whole window's count (shaders/average_pooling_grad.comp,
div_count: q0 = |v| * RECIPROCAL, then the exact remainder picks q0's significand, one more or
one less), modelled in numpy for every count d from 3 to 128 that is not a power of two and
every float32 significand, at two exponents (the road is the same at every exponent where v
and q0 are normal and q0 is past the second binade, the kernel's condition), with the product
rounded to nearest, up and down (Vulkan fixes the direction only under RoundingModeRTE): the
model's bits, where it does not leave to div_count_of, against the exact quotient correctly
rounded (fractions where float64 and the model differ), and how often it leaves. Then the
float16 road (HALF_BY_INTEGERS: a float16 dY's 11 significant bits and one integer division
by 2d) for every such d and every finite nonzero float16, against numpy's float32 division
(correctly rounded).

    python3 benchmarks/investigations/pooling_division.py      (a few minutes, numpy only)
"""

from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from pyvkgrad.ops.average_pooling_grad import reciprocal_bits  # noqa: E402


def rounded(exact: np.ndarray, direction: str) -> np.ndarray:
    """Float64 values (exact products of two float32) rounded to float32 to nearest, up or
    down (positive values)."""
    f = exact.astype(np.float32)  # to nearest: one rounding of the exact value
    if direction == "up":
        f = np.where(f < exact, np.nextafter(f, np.float32(np.inf)), f)
    elif direction == "down":
        f = np.where(f > exact, np.nextafter(f, np.float32(0)), f)
    return f.astype(np.float32)


def model(v_bits: np.ndarray, d: int, direction: str = "nearest") -> tuple:
    """The kernel's road on positive normal v: (result bits, whether it leaves to
    div_count_of)."""
    reciprocal = np.uint32(reciprocal_bits(d)).view(np.float32)
    exact = v_bits.view(np.float32).astype(np.float64) * np.float64(reciprocal)  # 48 bits
    q0 = rounded(exact, direction)
    bits = q0.view(np.uint32).astype(np.int64)
    shift = (v_bits.astype(np.int64) >> 23) - (bits >> 23)
    assert shift.min() >= 0 and shift.max() <= 8, (d, shift.min(), shift.max())
    mq = (bits & 0x7FFFFF) | 0x800000
    r = (((v_bits.astype(np.int64) & 0x7FFFFF) | 0x800000) << shift) - mq * d
    up, down = 2 * r > d, 2 * r < -d
    leaves = (np.abs(2 * r) >= 3 * d) | ((r < 0) & (mq == 0x800000))
    return (bits + up - down).astype(np.uint32), leaves


def half_by_integers(h_bits: np.ndarray, d: int) -> np.ndarray:
    """The kernel's float16 road: the float32 bits of v / d for the float16 v of bits h_bits
    (finite, nonzero), by integers as div_count computes them."""
    u = h_bits.view(np.float16).astype(np.float32).view(np.uint32).astype(np.uint64)
    a = u & 0x7FFFFFFF
    c = d.bit_length()  # 2^(c - 1) < d < 2^c
    m = ((a & 0x7FFFFF) | 0x800000) >> 13
    assert (((a & 0x7FFFFF) | 0x800000) & 0x1FFF == 0).all()  # a half's last 13 bits are 0
    s = np.where(m < (d << (11 - c)), 13 + c, 12 + c).astype(np.uint64)
    twice = (m << s) * 2 + d
    assert (twice < 2 ** 32).all()
    q = twice // (2 * d)
    assert ((q >= 2 ** 23) & (q <= 2 ** 24)).all()
    return ((u & 0x80000000) | ((((a >> 23) + 12 - s) << 23) + q)).astype(np.uint32)


def check_half_by_integers() -> int:
    """HALF_BY_INTEGERS against numpy's float32 division, every count d from 3 to 127 that is
    not a power of two and every finite nonzero float16: the number of wrong results."""
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    finite = h.view(np.float16)
    h = h[np.isfinite(finite) & (finite != 0)]
    v = h.view(np.float16).astype(np.float32)
    wrong = 0
    for d in range(3, 128):
        if d & (d - 1) == 0:
            continue
        want = (v / np.float32(d)).astype(np.float32).view(np.uint32)
        wrong += int((half_by_integers(h, d) != want).sum())
    print(f"float16 over counts 3-127 (not powers of two) by integers, every finite nonzero "
          f"float16: {wrong} wrong")
    return wrong


def main() -> None:
    significands = np.arange(0x800000, 0x1000000, dtype=np.uint32)
    wrong = 0
    leaving = {direction: 0 for direction in ("nearest", "up", "down")}
    for d in range(3, 129):
        if d & (d - 1) == 0:
            continue
        for biased in (127, 200):
            v = (np.uint32(biased) << 23) | (significands & 0x7FFFFF)
            # float64's quotient is within half a unit of float64's last place; rounded to
            # float32 it can differ from the correct rounding only near a half-way point:
            # those are settled exactly.
            near = (v.view(np.float32).astype(np.float64) / d).astype(np.float32).view(np.uint32)
            for direction in leaving:
                got, leaves = model(v, d, direction)
                for i in np.flatnonzero((got != near) & ~leaves):
                    exact = Fraction(int(significands[i]), d) * Fraction(2) ** (biased - 150)
                    best = min((int(got[i]), int(near[i])), key=lambda b: abs(
                        Fraction(float(np.uint32(b).view(np.float32))) - exact))
                    if best != got[i]:
                        wrong += 1
                        print(f"d {d} ({direction}): v {hex(int(v[i]))} gives "
                              f"{hex(int(got[i]))}, not {hex(best)}")
                leaving[direction] += int(leaves.sum())
    total = 2 * significands.size * sum(1 for d in range(3, 129) if d & (d - 1))
    print(f"counts 3-128 (not powers of two), every significand at two exponents: {wrong} "
          f"wrong; left to div_count_of, of {total}: " + ", ".join(
              f"{n} with the product rounded {direction}" for direction, n in leaving.items()))
    wrong += check_half_by_integers()
    sys.exit(1 if wrong else 0)


if __name__ == "__main__":
    main()
