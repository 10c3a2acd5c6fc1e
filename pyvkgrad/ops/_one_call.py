"""The one-call driver: what every one-call function does between numpy arrays and results.

1. a repeated call with arrays of the same layouts and parameters runs the cached problem
   (`layout_key`, the device's one-call cache) without building anything;
2. otherwise each array is described (`array_desc`: its strides kept, or a packed copy) and
   the operator builds its descriptor from those descriptions (`describe`);
3. a problem with a tensor beyond the device's buffer limit is cut along the descriptor's
   independent axes into pieces that fit, each run as a one-call problem of its own (`rerun`,
   _split.py);
4. the rest compiles (cached), uploads, runs and reads back in one submission.

An operator family declares its arrays (by argument name; the descriptor field is the name
with `_tensor`), its parameters (part of the cache key), `describe` and `rerun`.
"""

from __future__ import annotations

from typing import Callable, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..tensor import TensorDesc, array_desc, dml_name
from ._split import fits, refuse_unless_a_cut_may_fit, run_in_pieces

# describe(descs, device) -> (descriptor, outputs): descs maps each array's argument name to
# its TensorDesc; outputs maps each output's argument name to (shape returned, bytes per
# element counted against the buffer limit: more than the output's own where a scratch buffer
# of its element count is wider), in the order the one-call function returns them.
Describe = Callable[[Dict[str, TensorDesc], object],
                    Tuple[object, Dict[str, Tuple[tuple, int]]]]


def field(name: str) -> str:
    """The descriptor field of a one-call argument: `input_gradient` -> `input_gradient_tensor`."""
    return f"{name}_tensor"


def run(operator: str, device, params: tuple, arrays: Mapping[str, np.ndarray],
        describe: Describe, rerun: Optional[Callable[..., Sequence[np.ndarray]]],
        data_types=None) -> Tuple[np.ndarray, ...]:
    """One call of `operator` on `arrays` (argument name -> array, in the descriptor's field
    order); `rerun(device, **pieces)` is the one-call function on a piece of the problem (None
    for an operator that cuts along no axis). `data_types`: those the arrays may have
    (default: FLOAT32 and FLOAT16), or a mapping from argument name to them (default for a
    name it lacks). Returns the outputs, new packed arrays, in the order
    `describe` gives them."""
    from ..device import get_device, one_call_cache
    from ..one_call_cache import layout_key

    dev = get_device(device)
    cache = one_call_cache(dev)
    values = tuple(arrays.values())
    layout = layout_key(operator, params, *values)
    again = cache.again(layout, values)
    if again is not None:
        return tuple(again)
    limit = dev.max_buffer_bytes
    if not isinstance(data_types, Mapping):
        data_types = {name: data_types for name in arrays}
    # Checks name DirectML's field (`input_gradient` -> InputGradientTensor), as the
    # descriptor's own checks do.
    descs = {name: array_desc(a, operator, dml_name(field(name)), limit,
                              data_types.get(name))[0]
             for name, a in arrays.items()}
    desc, outputs = describe(descs, dev)
    fields = dict(desc.tensor_fields())
    sizes = {name: (fields[field(name)][0].sizes, fields[field(name)][0].data_type.numpy_dtype,
                    item) for name, (_, item) in outputs.items()}
    if not fits(limit, arrays, sizes):
        # From sizes alone first: finding the independent axes may cost work along them.
        refuse_unless_a_cut_may_fit(operator, limit, arrays, sizes, desc.cut_candidates(),
                                    desc.INDEPENDENT_AXES)
        pieces = run_in_pieces(operator, limit, arrays, sizes, desc.independent_axes(),
                               desc.INDEPENDENT_AXES, lambda **p: rerun(dev, **p))
        return tuple(pieces[name].reshape(shape) for name, (shape, _) in outputs.items())
    return tuple(cache.run(desc, {field(name): a for name, a in arrays.items()},
                           [field(name) for name in outputs],
                           [shape for shape, _ in outputs.values()], layout))


def run_described(device, desc, arrays: Mapping[str, np.ndarray], outputs: Sequence[str],
                  shapes: Sequence[tuple]) -> list:
    """A descriptor built by the caller (the PyTorch bridge's one-call execution) run through
    the device's one-call cache: `arrays` by input field, outputs by field, reshaped."""
    from ..device import get_device, one_call_cache

    return one_call_cache(get_device(device)).run(desc, dict(arrays), outputs, shapes)
