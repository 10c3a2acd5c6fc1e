"""Shared case catalogue: sizes and layouts chosen to break kernels."""

import numpy as np

# Element counts around workgroup (256) and subgroup (8/32/64) widths, primes, and 1.
EDGE_COUNTS = [1, 2, 3, 7, 31, 32, 33, 63, 64, 65, 127, 255, 256, 257, 1021, 4099]
# More elements than 65535 workgroups of 256 invocations cover (grid-stride loops).
BEYOND_WORKGROUP_LIMIT = 65535 * 256 + 257

# One shape per rank 1..8 with odd sizes.
SHAPES_BY_RANK = [(7,), (3, 5), (2, 3, 5), (2, 3, 1, 7), (2, 1, 3, 2, 5), (1, 2, 3, 2, 2, 3),
                  (2, 1, 2, 3, 1, 2, 3), (1, 2, 1, 2, 3, 2, 1, 3)]

DTYPES = [np.float32, np.float16]


def random_array(rng, shape, dtype, low=-2.0, high=2.0):
    return rng.uniform(low, high, size=shape).astype(dtype)


def strided_view(rng, shape, dtype):
    """A non-contiguous view of `shape`: every other element along the last axis, with the
    axes of a larger array permuted (an NHWC-style layout)."""
    big = random_array(rng, tuple(shape[:-1]) + (2 * shape[-1],), dtype)[..., ::2]
    order = list(range(len(shape)))[::-1]
    return np.transpose(np.ascontiguousarray(np.transpose(big, order)), order)


def broadcast_view(rng, shape, dtype, axis=0):
    """A zero-stride view along `axis` (np.broadcast_to)."""
    small_shape = list(shape)
    small_shape[axis] = 1
    return np.broadcast_to(random_array(rng, small_shape, dtype), shape)


VIEWS = ("packed", "transposed", "sliced", "broadcast")


def view_of(array, kind, axis=0):
    """`array` through another layout: "packed" (itself), "transposed" (the same values in
    column-major memory), "sliced" (every other element of a larger array) or "broadcast" (its
    first slice along `axis` repeated, zero strides: other values)."""
    if kind == "transposed":
        return np.asfortranarray(array)
    if kind == "sliced":
        big = np.zeros(tuple(2 * s for s in array.shape), array.dtype)
        inner = tuple(slice(None, None, 2) for _ in array.shape)
        big[inner] = array
        return big[inner]
    if kind == "broadcast":
        return np.broadcast_to(np.take(array, [0], axis=axis), array.shape)
    return array
