"""The float64 oracles of AVERAGE_POOLING_GRAD and MAX_POOLING_GRAD (docs/semantics.md §13)."""

import numpy as np

from ._reference_common import _f64


def _pooling_windows(in_sizes, out_sizes, strides, window_size, start_padding, end_padding,
                     dilations):
    """Per output position o (row-major), (o, the real positions of its window in row-major
    scan order, its count of positions inside the padded extent [-P0, In + P1)). Per axis:
    p = o S - P0 + k D for k in [0, W)."""
    import itertools
    axes = range(len(in_sizes))
    for o in itertools.product(*(range(n) for n in out_sizes)):
        per_axis = [[o[d] * strides[d] - start_padding[d] + k * dilations[d]
                     for k in range(window_size[d])] for d in axes]
        real = [[p for p in ps if 0 <= p < in_sizes[d]] for d, ps in enumerate(per_axis)]
        padded = int(np.prod([sum(-start_padding[d] <= p < in_sizes[d] + end_padding[d]
                                  for p in ps) for d, ps in enumerate(per_axis)]))
        yield o, list(itertools.product(*real)), padded


def average_pooling_grad(input_gradient, output_gradient_sizes, strides, window_size,
                         start_padding, end_padding, include_padding):
    """dX[p] = sum over windows o containing p of dY[o] / count(o), count(o) the window's
    positions inside the padded extent (include_padding) or its real positions; windows with
    no real element add nothing."""
    dy = _f64(input_gradient)
    dx = np.zeros(tuple(output_gradient_sizes))
    spatial = dx.shape[2:]
    for o, real, padded in _pooling_windows(spatial, dy.shape[2:], strides, window_size,
                                            start_padding, end_padding,
                                            (1,) * len(spatial)):
        if not real:
            continue
        term = dy[(...,) + o] / (padded if include_padding else len(real))
        for p in real:
            dx[(...,) + p] += term
    return dx


def max_pooling_grad(input, input_gradient, strides, window_size, start_padding, end_padding,
                     dilations):
    """dX[p] = sum over windows o whose argmax a(o) is p of dY[o]: a(o) the real position
    with the largest X, ties to the first in scan order (lowest logical index), a NaN above
    every number and the first NaN winning; windows with no real element add nothing."""
    x, dy = _f64(input), _f64(input_gradient)
    dx = np.zeros(x.shape)
    for o, real, _ in _pooling_windows(x.shape[2:], dy.shape[2:], strides, window_size,
                                       start_padding, end_padding, dilations):
        if not real:
            continue
        values = np.stack([x[(...,) + p] for p in real], axis=-1)  # (N, C, positions)
        nan = np.isnan(values)
        # The first NaN where there is one, else the first maximum.
        best = np.where(nan.any(-1), np.argmax(nan, -1),
                        np.argmax(np.where(nan, -np.inf, values), -1))
        for k, p in enumerate(real):
            chosen = best == k
            dx[(...,) + p] += np.where(chosen, dy[(...,) + o], 0.0)
    return dx
