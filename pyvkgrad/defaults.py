"""Default parameters of the one-call functions, shared by them and by the float64 oracle.

The oracle (reference.py) is independent of the GPU code, since it is the check; a default is
part of the interface both implement, so it is computed here, once.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import numpy as np


def resample_grad(input_gradient_sizes: Sequence[int], output_gradient_sizes: Sequence[int],
                  scales: Optional[Sequence[float]] = None,
                  input_pixel_offsets: Optional[Sequence[float]] = None,
                  output_pixel_offsets: Optional[Sequence[float]] = None
                  ) -> Tuple[Sequence[float], Sequence[float], Sequence[float]]:
    """(scales, input_pixel_offsets, output_pixel_offsets) with those given as None filled in
    as DirectMLX's `dml::ResampleGrad` does: per dimension, scale = dY size / dX size (the
    forward's output over its input, divided in float32), input offset 0.5 and output offset
    -0.5 (half-pixel centres)."""
    rank = len(input_gradient_sizes)
    if scales is None:
        scales = tuple(float(np.float32(o) / np.float32(i))
                       for o, i in zip(input_gradient_sizes, output_gradient_sizes))
    if input_pixel_offsets is None:
        input_pixel_offsets = (0.5,) * rank
    if output_pixel_offsets is None:
        output_pixel_offsets = (-0.5,) * rank
    return scales, input_pixel_offsets, output_pixel_offsets



# ROI_ALIGN_GRAD (docs/semantics.md §16): pyvkgrad keeps every sample index of an axis exact in
# float32, N = O * S <= 2^24 samples, so S is capped at 2^24 // O (a region over ~2^24 pixels
# long, where float32 cannot place samples apart anyway) and MinimumSamplesPerOutput * O above
# 2^24 is refused. The oracle and the descriptor share it.
ROI_ALIGN_GRAD_MAX_AXIS_SAMPLES = 2**24
