"""ResampleGrad's plans (the kernels: resample_grad.py's docstring): the gather, in windows of
each element's terms where the driver ends long loops; the walk kernels where at most two axes
are resampled; the atomic scatter; and the count of loop iterations that keeps every invocation
within the driver's limit. Every gather plan gives the same bits (the canonical order).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Optional

import numpy as np

from ..plan import LOOP_MARGIN, Dispatch, Limits, Plan, Scratch, grid, right_align
from ..tensor import TensorDesc, fail, packed_strides
from ._resample_grad_tables import InterpolationMode, TableBuilder, u32

if TYPE_CHECKING:
    from .resample_grad import ResampleGradDesc

AXES = 4  # kernels index 4 dimensions, right-aligned
MAX_COUNT = 2**31 - 1  # grid-stride loops in uint32


def plan(desc: "ResampleGradDesc", maps, limits: Limits, gather: Optional[dict]) -> Plan:
    """ResampleGradDesc.plan's dispatches, from the descriptor's per-axis `maps` (its
    axis_maps())."""
    dy, dx = desc.input_gradient_tensor, desc.output_gradient_tensor
    pad = AXES - dy.rank
    is_f16 = dx.data_type.element_size == 2
    is_linear = desc.interpolation_mode == InterpolationMode.LINEAR
    wg = limits.local_size
    count_x, count_y = dx.element_count, dy.element_count
    paired = is_f16 and dx.is_packed
    tensors = ("input_gradient_tensor", "output_gradient_tensor")
    # What the gather and scatter kernels share (shaders/include/resample_grad.glsl).
    shared = dict(WG=wg, IS_F16=is_f16, IS_LINEAR=is_linear,
                  IDENTITY=right_align((m.identity for m in maps), AXES, True))
    tables = TableBuilder()
    if desc.algorithm == "gather":
        options = dict(_WALK_DEFAULTS, **(gather or {}))
        if options["kernel"] not in ("auto", "walk", "gather"):
            raise ValueError(f"resample_grad: unknown gather kernel {options['kernel']!r}")
        if options["window"] is not None and options["kernel"] == "walk":
            raise ValueError("resample_grad: a window is the general gather's, not the walk's")
        if options["kernel"] != "gather" and options["window"] is None:
            walk = _walk_plan(desc, maps, limits, options)
            if walk is not None:
                return walk
            if options["kernel"] == "walk":
                raise ValueError("resample_grad: the walk kernels do not apply here")
        beg, cnt, wgt = [0] * AXES, [0] * AXES, [0] * AXES
        for d, m in enumerate(maps):
            if m.identity:
                continue
            k = pad + d
            cnt[k] = tables.add(m.counts)
            beg[k] = cnt[k] if m.begin is None else tables.add(m.begin)
            wgt[k] = tables.add(m.weights.view(np.uint32)) if is_linear else 0
        items = -(-count_x // 2) if paired else count_x
        gather = dict(shared, DX_SIZES=right_align(dx.sizes, AXES, 1),
                      DY_STRIDES=right_align(dy.element_strides, AXES, 0),
                      BEGIN=tuple(beg), COUNTS=tuple(cnt), WEIGHTS=tuple(wgt))
        windows = _windows(desc.OPERATOR, maps, pad, items, 2 if paired else 1, count_x, wg,
                           limits, dx.sizes, options["window"])
        if windows is None:
            return Plan((Dispatch(
                "resample_grad_gather",
                dict(tables="tables", dy="input_gradient_tensor", dx="output_gradient_tensor"),
                grid(items, wg, limits),
                constants=dict(gather, PAIRED=paired,
                               DX_STRIDES=right_align(dx.element_strides, AXES, 0)),
                push=dict(count=count_x)),),
                (tables.scratch(),), tensors=tensors)
        # Too many terms per element for the driver's loop limit: windows of each element's
        # terms in their canonical order, each dispatch continuing the running sums the last
        # left in float32 scratch (linear: the unfinished row sum too; nearest binds a word).
        dispatches = [Dispatch(
            "resample_grad_gather_windowed",
            dict(tables="tables", dy="input_gradient_tensor", accumulator="accumulator",
                 row_sums="row_sums"),
            grid(count_x, wg, limits), constants=gather,
            push=dict(count=count_x, window_begin=begin, window_end=end))
            for begin, end in windows]
        dispatches.append(_convert(dx, is_f16, paired, wg, limits))
        return Plan(tuple(dispatches),
                    (tables.scratch(), Scratch("accumulator", 4 * count_x),
                     Scratch("row_sums", 4 * count_x if is_linear else 4)),
                    tensors=tensors)
    forward = [0] * AXES
    for d, m in enumerate(maps):
        if m.identity:
            continue
        forward[pad + d] = tables.add(m.first)
        if is_linear:
            tables.add(m.weight_first.view(np.uint32))
            tables.add(m.weight_next.view(np.uint32))
    scratch = [tables.scratch()]
    # A packed float32 dX accumulates in place; otherwise a packed float32 scratch does,
    # then is stored in dX's type and layout (zeroing a strided dX whole would write
    # between its elements).
    in_place = not is_f16 and dx.is_packed
    if in_place:
        target, target_strides, fill_count = "output_gradient_tensor", dx.element_strides, \
            count_x
    else:
        target, target_strides, fill_count = "accumulator", packed_strides(dx.sizes), count_x
        scratch.append(Scratch("accumulator", 4 * count_x))
    dispatches = [
        Dispatch("resample_grad_fill", dict(accumulator=target),
                 grid(fill_count, wg, limits), constants=dict(WG=wg),
                 push=dict(count=fill_count, value=0)),
        # Native float atomics where the device has them enabled, else compare-and-swap.
        Dispatch("resample_grad_atomic_native" if limits.float_atomic_add
                 else "resample_grad_atomic",
                 dict(tables="tables", dy="input_gradient_tensor", accumulator=target),
                 grid(count_y, wg, limits),
                 constants=dict(shared, DY_SIZES=right_align(dy.sizes, AXES, 1),
                                DY_STRIDES=right_align(dy.element_strides, AXES, 0),
                                ACCUMULATOR_STRIDES=right_align(target_strides, AXES, 0),
                                FORWARD=tuple(forward)),
                 push=dict(count=count_y)),
    ]
    if not in_place:
        dispatches.append(_convert(dx, is_f16, paired, wg, limits))
    if limits.max_loop_iterations:
        # Per dY element the tap loops (2 taps per resampled axis, linear), and per tap
        # at least one pass of the compare-and-swap loop; per dX element (or word) one
        # iteration of the fill and of the conversion.
        taps = [1] * pad + [2 if is_linear and not m.identity else 1 for m in maps]
        cas = 0 if limits.float_atomic_add else math.prod(taps)
        if (_per_invocation(count_y, wg, limits) * (1 + _nested(taps) + cas)
                > limits.max_loop_iterations - 64):
            _beyond_loop_limit(desc.OPERATOR, "InputGradientTensor", dy.sizes, limits)
        if _per_invocation(count_x, wg, limits) > limits.max_loop_iterations - 64:
            _beyond_loop_limit(desc.OPERATOR, "OutputGradientTensor", dx.sizes, limits)
    return Plan(tuple(dispatches), tuple(scratch), tensors=tensors)


def _convert(dx: TensorDesc, is_f16: bool, paired: bool, wg: int, limits: Limits) -> Dispatch:
    """Store the packed float32 accumulator into dX's data type and layout."""
    count = dx.element_count
    return Dispatch("resample_grad_convert",
                    dict(accumulator="accumulator", dx="output_gradient_tensor"),
                    grid(-(-count // 2) if paired else count, wg, limits),
                    constants=dict(WG=wg, IS_F16=is_f16, PAIRED=paired,
                                   SIZES=right_align(dx.sizes, AXES, 1),
                                   DX_STRIDES=right_align(dx.element_strides, AXES, 0)),
                    push=dict(count=count))


def _per_invocation(count: int, wg: int, limits: Limits) -> int:
    """Items each invocation of a grid-stride loop over `count` items runs (at most)."""
    return -(-count // (grid(count, wg, limits) * wg))


def _nested(n) -> int:
    """Iterations of the loops nested as n[0], n[1], ...: n0 + n0 n1 + n0 n1 n2 + ..."""
    return sum(math.prod(n[:k + 1]) for k in range(len(n)))


def _beyond_loop_limit(operator: str, field: str, sizes, limits: Limits):
    """RuntimeError naming `operator` (RESAMPLE_GRAD or RESAMPLE_GRAD1) and its tensor `field`."""
    fail(operator, f"{field}.Sizes", f"need fewer loop iterations per invocation than the "
         f"device allows ({limits.max_loop_iterations} with {limits.max_workgroups} "
         f"workgroups of {limits.local_size})", "a smaller problem", sizes, kind=RuntimeError)


def _windows(operator: str, maps, pad: int, items: int, per_item: int, count: int, wg: int,
             limits: Limits, sizes, window: Optional[int]):
    """None where resample_grad_gather sums every element within the driver's loop limit
    (`limits.max_loop_iterations`) and no `window` is asked for; else the windows of
    resample_grad_gather_windowed, in the order they run: (begin, end) ranges of term numbers
    in each element's canonical order, `window` terms long or as long as the limit allows.

    An invocation of the gather runs ceil(items / invocations) items of `per_item` dX elements,
    and an element with n_d contributors per axis runs n0 + n0 n1 + n0 n1 n2 + n0 n1 n2 n3 loop
    iterations (plus each loop's final test, which `_nested(n) + 4` covers; counting the most
    contributors along each axis also bounds lanes that run in lockstep, as lavapipe's do, and
    loop while any lane does). The windowed one runs ceil(count / invocations) elements, each
    one loop of at most L + 1 iterations for a window of L terms, whatever the lane
    (shaders/resample_grad_gather_windowed.comp), and the grid loop's; 8 per element cover
    those. Where even windows of one term do not fit, RuntimeError naming `operator` and dX's
    `sizes`.
    """
    limit = limits.max_loop_iterations
    most = [1] * AXES
    for d, m in enumerate(maps):
        if not m.identity:
            most[pad + d] = int(np.diff(m.counts.astype(np.int64)).max())
    terms = math.prod(most)  # the most terms of any element (the maps are separable)
    if window is None:
        if not limit or (_per_invocation(items, wg, limits) * (1 + per_item * (_nested(most) + 4))
                         <= limit - LOOP_MARGIN):
            return None
    per_element = _per_invocation(count, wg, limits)
    longest = (limit - LOOP_MARGIN) // per_element - 8 if limit else terms
    if longest < 1:  # too many elements per invocation: windows cannot help
        _beyond_loop_limit(operator, "OutputGradientTensor", sizes, limits)
    if window is None:
        window = max(1, min(longest, terms))
    elif not isinstance(window, int) or not 1 <= window <= longest:
        raise ValueError(f"resample_grad: a window of {window!r} terms: expected 1 to "
                         f"{longest} on this device")
    return [(begin, min(begin + window, terms)) for begin in range(0, max(terms, 1), window)]


# ---- the walk kernels ----------------------------------------------------------------------------

_WALK_MAX_ROWS, _WALK_MAX_COLS, _WALK_MAX_U = 16, 2, 12  # include/resample_grad_walk.glsl
# rows: dX rows per invocation (None: 8, fewer for small problems); pair: float16 invocations
# own whole 32-bit words of dX where the layout allows; lanes: "auto" (along the memory-innermost
# identity axis where dX has one, else along the columns) or "q" (columns); pad: round the
# column groups up to whole subgroups, so no subgroup straddles two row blocks; cols: dX columns
# per invocation (None: 2 where a float16 pair of columns is one word of dX, else 1); switch,
# select, zero_weights, align: ROW_SWITCH, SELECT_VALUES, ZERO_WEIGHTS, DY_ALIGNED
# (include/resample_grad_walk.glsl; zero_weights applies with several columns only, align to
# float16 dY read by words along the columns). window (benchmarks and tests): run the general
# gather in windows of this many terms per element (resample_grad_gather_windowed), as where the
# driver's loop limit needs them (None: only there).
_WALK_DEFAULTS = dict(kernel="auto", rows=None, pair=True, lanes="auto", pad=False, cols=None,
                      switch=None, select=None, zero_weights=None, align=None, window=None)
# Rows per invocation, the row `switch` (False: a loop) and zeroed values (False: predicated
# additions) where not asked for, per (linear, float16): the fastest settings on the H100 over
# the benchmark's shapes (benchmarks/investigations/gather_variants.py,
# benchmarks/RESULTS.md). Every setting gives the same bits.
_WALK_TUNED = {
    (False, False): dict(rows=4, switch=False, select=True, zero_weights=False, align=False),
    (True, False): dict(rows=4, switch=True, select=True, zero_weights=False, align=False),
    (False, True): dict(rows=2, switch=True, select=True, zero_weights=False, align=True),
    (True, True): dict(rows=4, switch=False, select=False, zero_weights=True, align=True)}
_WALK_MIN_ITEMS = 2**18  # auto rows: fewer rows per invocation until this many invocations


def _walk_plan(desc: "ResampleGradDesc", maps, limits: Limits, options: dict) -> Optional[Plan]:
    """resample_grad_walk or resample_grad_walk_pair (include/resample_grad_walk.glsl), or None
    where they do not apply: no resampled axis or more than two, an invocation's columns reading
    more than _WALK_MAX_U dY values, or more loop iterations than the driver allows.

    Axes: the resampled ones become P and Q in logical order (so the summation order stays the
    logical one); a single resampled axis is Q where it is dX's memory-innermost axis, else P
    with Q the innermost identity axis. B is the innermost of the other two (identity) axes.
    """
    dy, dx = desc.input_gradient_tensor, desc.output_gradient_tensor
    pad = AXES - dy.rank
    sizes, dy_sizes = right_align(dx.sizes, AXES, 1), right_align(dy.sizes, AXES, 1)
    dxs = right_align(dx.element_strides, AXES, 0)
    dys = right_align(dy.element_strides, AXES, 0)
    amaps = [None] * pad + list(maps)
    resampled = [k for k in range(AXES) if amaps[k] is not None and not amaps[k].identity]
    if not 1 <= len(resampled) <= 2:
        return None

    def stride(k):  # dX's stride along axis k; axes of one element come last
        return dxs[k] if sizes[k] > 1 else 2**63

    identity = [k for k in range(AXES) if k not in resampled]
    if len(resampled) == 2:
        p, q = resampled
    else:
        inner = min(identity, key=stride)
        if stride(resampled[0]) < stride(inner):
            p, q = inner, resampled[0]
        else:
            p, q = resampled[0], inner
    a, b = sorted((k for k in range(AXES) if k not in (p, q)), key=stride, reverse=True)
    lanes_on_b = {"auto": sizes[b] > 1 and dxs[b] == 1 and stride(q) != 1,
                  "q": False, "b": sizes[b] > 1}[options["lanes"]]
    is_f16 = dx.data_type.element_size == 2
    is_linear = desc.interpolation_mode == InterpolationMode.LINEAR
    tuned = _WALK_TUNED[(is_linear, is_f16)]
    options = {k: tuned[k] if v is None and k in ("switch", "select", "zero_weights", "align")
               else v
               for k, v in options.items()}

    def even_but(strides, sz, k):  # every other stride even: element offsets keep k's parity
        return all(strides[i] % 2 == 0 for i in range(AXES) if i != k and sz[i] > 1)

    pair_lanes, cols = 1, 1
    if is_f16 and options["pair"]:
        if lanes_on_b:
            if sizes[b] % 2 == 0 and dxs[b] == 1 and even_but(dxs, sizes, b):
                pair_lanes = 2
        elif sizes[q] % 2 == 0 and dxs[q] == 1 and even_but(dxs, sizes, q):
            cols = 2
    pair_q = cols == 2
    if options["cols"] is not None and options["cols"] != cols:
        if not 1 <= options["cols"] <= _WALK_MAX_COLS or pair_lanes == 2:
            return None
        cols, pair_q = options["cols"], False
    if pair_lanes == 2:
        dy_words = is_f16 and dys[b] == 1 and even_but(dys, dy_sizes, b)
    else:
        dy_words = is_f16 and dys[q] == 1 and even_but(dys, dy_sizes, q)
    p_map, q_map = amaps[p], amaps[q]
    p_identity = p_map is None or p_map.identity
    q_identity = q_map is None or q_map.identity
    if not p_identity and is_linear and not np.all(p_map.weight_first != 0):
        return None  # the transposed tables drop such taps; the forward table would not

    def spans(m, block, size, count=False, align=1):
        """Per block of `block` inputs, the outputs they read: [lo, hi), or (lo, hi - lo) with
        `count`, lo rounded down to a multiple of `align`; and the most outputs a block reads."""
        counts = m.counts.astype(np.int64)
        n = np.diff(counts)
        begin = counts[:-1] if m.begin is None else m.begin.astype(np.int64)
        blocks = -(-size // block)
        fill = blocks * block - size
        lo = np.concatenate([np.where(n > 0, begin, 2**62), np.full(fill, 2**62)])
        hi = np.concatenate([np.where(n > 0, begin + n, -1), np.full(fill, -1)])
        lo, hi = lo.reshape(blocks, block).min(1), hi.reshape(blocks, block).max(1)
        empty = hi < 0
        lo[empty], hi[empty] = 0, 0
        lo -= lo % align
        return u32(np.stack([lo, hi - lo if count else hi], 1)), int((hi - lo).max())

    # Float16 dY read by words along Q, with every column span starting at an even element:
    # each dY row is whole words from the span's start (DY_ALIGNED). Several columns only
    # (the kernel finds a single column's contributors at the union's start), and only where
    # the rounded spans still fit in _WALK_MAX_U.
    align = 2 if dy_words and pair_lanes == 1 and options["align"] and cols > 1 else 1
    if q_identity:
        col_spans, most = None, cols
    else:
        col_spans, most = spans(q_map, cols, sizes[q], count=True, align=align)
        if most > _WALK_MAX_U and align == 2:
            align = 1
            col_spans, most = spans(q_map, cols, sizes[q], count=True)
        if most > _WALK_MAX_U and cols == 2 and options["cols"] is None:
            pair_q, cols = False, 1
            col_spans, most = spans(q_map, cols, sizes[q], count=True)
        if most > _WALK_MAX_U:
            return None
    dy_aligned = align == 2 and cols > 1 and (not q_identity or cols % 2 == 0)
    maxu = max(1, most)
    wg = limits.local_size
    col_groups = -(-sizes[q] // cols)
    col_slots = col_groups
    if options["pad"] and not lanes_on_b:
        col_slots = -(-col_groups // limits.subgroup_size) * limits.subgroup_size
    lanes_b = sizes[b] // pair_lanes

    def items(rows):
        return sizes[a] * lanes_b * -(-sizes[p] // rows) * col_slots

    rows = options["rows"]
    if rows is None:
        rows = tuned["rows"]
        while rows > 1 and items(rows) < _WALK_MIN_ITEMS:
            rows //= 2
    rows = max(1, min(rows, _WALK_MAX_ROWS, sizes[p]))
    count = items(rows)
    if count > MAX_COUNT:
        return None
    tables = TableBuilder()
    first = weight_first = weight_next = row_spans = 0
    begin = counts = weights = col_spans_at = 0
    if p_identity:
        most_rows = rows
    else:
        first = tables.add(p_map.first)
        if is_linear:
            weight_first = tables.add(p_map.weight_first.view(np.uint32))
            weight_next = tables.add(p_map.weight_next.view(np.uint32))
        spans_p, most_rows = spans(p_map, rows, sizes[p])
        row_spans = tables.add(spans_p)
    if not q_identity:
        counts = tables.add(q_map.counts)
        begin = counts if q_map.begin is None else tables.add(q_map.begin)
        weights = tables.add(q_map.weights.view(np.uint32)) if is_linear else 0
        col_spans_at = tables.add(col_spans)
    workgroups = grid(count, wg, limits)
    zero_weights = bool(options["zero_weights"]) and cols > 1
    if limits.max_loop_iterations:
        # Counted as if the driver unrolled nothing: per dY row the loads, the zeroed copies
        # of several columns, linear's row sums per column, and the additions into the rows.
        # zero_weights may sum a column twice (the second time tested), so counts it twice.
        twice = 2 if zero_weights else 1
        per_row = (1 + (maxu + 2) // 2 + maxu + (cols * (1 + maxu) if cols > 1 else 0)
                   + (twice * cols * (1 + maxu) if is_linear else 0)
                   + rows * (1 + twice * cols * (1 + maxu)))
        per_item = 2 + most_rows * per_row + cols * (1 + maxu) + 2 * rows * (1 + cols)
        if -(-count // (workgroups * wg)) * per_item > limits.max_loop_iterations - 64:
            return None
    order = (a, b, p, q)
    constants = dict(
        WG=wg, IS_F16=is_f16, IS_LINEAR=is_linear, IDENTITY=(True, True, p_identity, q_identity),
        ROWS=rows, COLS=cols, MAXU=maxu, LANES_ON_B=lanes_on_b, PAIR_Q=pair_q, DY_WORDS=dy_words,
        SIZES=tuple(sizes[k] for k in order), DX_STRIDES=tuple(dxs[k] for k in order),
        DY_STRIDES=tuple(dys[k] for k in order), FIRST=first, WEIGHT_FIRST=weight_first,
        WEIGHT_NEXT=weight_next, ROW_SPANS=row_spans, BEGIN=begin, COUNTS=counts,
        WEIGHTS=weights, COL_SPANS=col_spans_at, ROW_BLOCKS=-(-sizes[p] // rows),
        COL_GROUPS=col_groups, COL_SLOTS=col_slots, ROW_SWITCH=bool(options["switch"]),
        SELECT_VALUES=bool(options["select"]), ZERO_WEIGHTS=zero_weights, DY_ALIGNED=dy_aligned)
    kernel = "resample_grad_walk_pair" if pair_lanes == 2 else "resample_grad_walk"
    return Plan((Dispatch(kernel, dict(tables="tables", dy="input_gradient_tensor",
                                       dx="output_gradient_tensor"),
                          workgroups, constants=constants, push=dict(count=count)),),
                (tables.scratch(),), tensors=("input_gradient_tensor", "output_gradient_tensor"))
