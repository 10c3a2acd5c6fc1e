#!/usr/bin/env python3
"""AVERAGE_POOLING_GRAD's division by a whole window's count (shaders/average_pooling_grad.comp,
div_count: q0 = |v| * RECIPROCAL, then the exact remainder picks q0's significand, one more or
one less), modelled in numpy for every count d from 3 to 128 that is not a power of two and
every float32 significand, at two exponents (the road is the same at every exponent where v
and q0 are normal and q0 is past the second binade, the kernel's condition), with the product
rounded to nearest, up and down (Vulkan fixes the direction only under RoundingModeRTE): the
model's bits, where it does not leave to div_count_of, against the exact quotient correctly
rounded (fractions where float64 and the model differ), and how often it leaves. Then the
float16 road (HALF_BY_FLOATS: the product's exact remainder in float32 operations that are
all exact, its 12 high significant bits and the rest apart; where one step may not do,
HALF_BY_INTEGERS: the 11 significant bits and one integer division by 2d) for every such d,
every finite nonzero float16 and each direction of the product's rounding, against numpy's
float32 division (correctly rounded).

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


def half_by_floats(h_bits: np.ndarray, d: int, direction: str = "nearest") -> np.ndarray:
    """The kernel's float16 road (HALF_BY_FLOATS): the float32 bits of v / d for the float16 v
    of bits h_bits (finite, nonzero), as div_count computes them, the product q0 = |v| *
    RECIPROCAL rounded `direction`, and where it leaves to HALF_BY_INTEGERS. Asserts that
    every other operation is exact (so its rounding direction does not matter)."""
    u = h_bits.view(np.float16).astype(np.float32).view(np.uint32)
    sign = u & np.uint32(0x80000000)
    a = (u & np.uint32(0x7FFFFFFF)).view(np.float32)
    reciprocal = np.uint32(reciprocal_bits(d)).view(np.float32)
    q0 = rounded(a.astype(np.float64) * np.float64(reciprocal), direction)
    bits = q0.view(np.uint32)
    assert ((bits >> 23) > 0).all()  # normal
    high = (bits & np.uint32(0xFFFFF000)).view(np.float32)

    def exact(f32, f64):
        assert (f32.astype(np.float64) == f64).all()
        return f32

    low = exact(q0 - high, q0.astype(np.float64) - high)
    f = np.float32(d)
    high_d = exact(high * f, high.astype(np.float64) * d)
    low_d = exact(low * f, low.astype(np.float64) * d)
    first = exact(a - high_d, a.astype(np.float64) - high_d)
    r = exact(first - low_d, first.astype(np.float64) - low_d)
    assert (r.astype(np.float64) == a.astype(np.float64) - d * q0.astype(np.float64)).all()
    half_unit = (bits & np.uint32(0x7F800000)).view(np.float32) * np.float32(d * 2.0 ** -24)
    step = np.where(r > half_unit, 1, np.where(r < -half_unit, -1, 0)).astype(np.int64)
    # One step is the correct rounding where |r| < 3 d u / 2 and q0 is no power of two with
    # the quotient below it (finer units there); elsewhere HALF_BY_INTEGERS.
    leaves = (np.abs(r) >= 3 * half_unit) | (((bits & np.uint32(0x7FFFFF)) == 0) & (r < 0))
    fast = sign | (bits.astype(np.int64) + step).astype(np.uint32)
    return np.where(leaves, half_by_integers(h_bits, d), fast), leaves


def check_half_by_floats() -> int:
    """HALF_BY_FLOATS against numpy's float32 division, every count d from 3 to 127 that is
    not a power of two and every finite nonzero float16, the product rounded to nearest, up
    and down: the number of wrong results."""
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    finite = h.view(np.float16)
    h = h[np.isfinite(finite) & (finite != 0)]
    v = h.view(np.float16).astype(np.float32)
    wrong = 0
    leaving = {direction: 0 for direction in ("nearest", "up", "down")}
    for d in range(3, 128):
        if d & (d - 1) == 0:
            continue
        want = (v / np.float32(d)).astype(np.float32).view(np.uint32)
        for direction in leaving:
            got, leaves = half_by_floats(h, d, direction)
            wrong += int((got != want).sum())
            leaving[direction] += int(leaves.sum())
    print(f"float16 over counts 3-127 (not powers of two) by floats, every finite nonzero "
          f"float16: {wrong} wrong; left to HALF_BY_INTEGERS: " + ", ".join(
              f"{n} with the product rounded {direction}" for direction, n in leaving.items()))
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
    wrong += check_half_by_floats()
    sys.exit(1 if wrong else 0)


if __name__ == "__main__":
    main()
