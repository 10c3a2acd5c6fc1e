"""ROI_ALIGN_GRAD's windows: the pieces of its regions' samples that one dispatch of a kernel
visits under a driver's loop limit, in summation order (roi_align_grad.py plans them), and the
refusal of a problem that would need too many. Also the operator's name and the bounds the
kernels share with the plan."""

from __future__ import annotations

from ..plan import LOOP_MARGIN
from ..tensor import fail

OPERATOR = "ROI_ALIGN_GRAD"
UINT32_MAX = 2**32 - 1
# Window bounds that mean "no bound" (the kernels take min(bound, count)).
UNBOUNDED = UINT32_MAX
# Dispatches a plan may take under a driver's loop limit before it refuses the problem.
MAX_DISPATCHES = 100_000


def plan_windows(regions: int, rows: int, cols: int, budget: int, overhead: int):
    """The windows one plan's kernel runs, in summation order, each as (first region, end
    region, (row offsets), (column offsets), loop iterations per item): all at once without
    a loop limit (`budget` 0); else chunks of regions, or of one region's rows, or of one row's
    columns, each within the budget (`overhead`: a region's iterations before its samples)."""
    whole = ((0, UNBOUNDED), (0, UNBOUNDED))
    region = overhead + rows * (cols + 2)
    if not budget or regions * region <= budget:
        return [(0, regions, *whole, regions * region)]
    if region <= budget:
        step = budget // region
        return [(r, min(r + step, regions), *whole, step * region)
                for r in range(0, regions, step)]
    if overhead + cols + 2 <= budget:
        step = (budget - overhead) // (cols + 2)
        check_windows(regions * -(-rows // step))
        return [(r, r + 1, (j, min(j + step, rows)), (0, UNBOUNDED), budget)
                for r in range(regions) for j in range(0, rows, step)]
    step = budget - overhead - 2
    if step < 1:
        # A device limit, not bad input: RuntimeError, as the other operators' plans raise.
        fail(OPERATOR, "Limits.max_loop_iterations", "is too small for the kernels",
             f"> {overhead + 2 + LOOP_MARGIN}", budget + LOOP_MARGIN, RuntimeError)
    check_windows(regions * rows * -(-cols // step))
    return [(r, r + 1, (j, j + 1), (i, min(i + step, cols)), budget)
            for r in range(regions) for j in range(rows) for i in range(0, cols, step)]


def check_windows(count: int) -> None:
    """Refuse, from the count alone, windows that would take more than MAX_DISPATCHES
    dispatches (each takes at least one), before listing them: a Minimum of 2^24 samples per
    output under lavapipe's loop limit would list billions."""
    if count > MAX_DISPATCHES:
        fail(OPERATOR, "MinimumSamplesPerOutput", "asks for more samples per output than "
             "this device's loop limit lets pyvkgrad visit", f"at most {MAX_DISPATCHES} "
             f"dispatches", f"at least {count}")
