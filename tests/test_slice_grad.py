"""SLICE_GRAD: the worked examples of docs/semantics.md §14, PyTorch's slicing backward, every
data type bit for bit (NaN payloads, -0, integer extremes), sizes that break kernels, strided
tensors, the canonical window and the plans, the same bits under other workgroup widths, loop
limits and buffer cuts, and the error rules. The operator table's tests cover the rest (every
rank and layout against the oracle, fuzzing, the compiled descriptor)."""

import dataclasses

import numpy as np
import pytest

import pyvkgrad
from pyvkgrad import DataType, TensorDesc, reference
from pyvkgrad.one_call_cache import OneCallCache
from pyvkgrad.ops.slice_grad import DATA_TYPES, SliceGradDesc
from pyvkgrad.plan import Limits
from pyvkgrad._cases_slice import slice_grad_values

DTYPES = [t.numpy_dtype for t in DATA_TYPES]


def bits(array):
    return np.asarray(array).view(f"u{array.dtype.itemsize}")


def check(device, dy, *window):
    """slice_grad on the device equals the oracle bit for bit; dY unchanged."""
    before = dy.copy()
    got = pyvkgrad.slice_grad(dy, *window, device=device)
    want = reference.slice_grad(dy, *window)
    assert got.dtype == dy.dtype and got.shape == tuple(window[0])
    np.testing.assert_array_equal(bits(got), bits(want), err_msg=f"{dy.dtype} {window}")
    np.testing.assert_array_equal(bits(dy), bits(before))
    return got


# ---- worked examples (docs/semantics.md §14) ----------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_sg1(device, dtype):
    """SLICE1's example layout: rows from 3 stepping -2, columns from 1 stepping 2."""
    dy = np.array([[10, 20], [30, 40]], dtype).reshape(1, 1, 2, 2)
    got = pyvkgrad.slice_grad(dy, (1, 1, 4, 4), (0, 0, 0, 1), (1, 1, 4, 3), (1, 1, -2, 2),
                              device=device)
    want = np.array([[0, 0, 0, 0], [0, 30, 0, 40], [0, 0, 0, 0], [0, 10, 0, 20]], dtype)
    np.testing.assert_array_equal(got.reshape(4, 4), want)


def test_sg2(device):
    """A 1-D reversal."""
    got = pyvkgrad.slice_grad(np.array([1, 2, 3], np.float32), (4,), (0,), (3,), (-1,),
                              device=device)
    np.testing.assert_array_equal(got, [3, 2, 1, 0])


def test_adjoint_of_slice1(device, rng):
    """<Slice1(x), y> = <x, SliceGrad(y)> exactly (integers), and dX is zero off the window."""
    x = rng.integers(-100, 100, (9, 10, 11)).astype(np.int32)
    window = ((9, 10, 11), (1, 0, 2), (7, 10, 9), (3, -1, -4))
    index = np.ix_(*[(o if s > 0 else o + n - 1) + s * np.arange(1 + (n - 1) // abs(s))
                     for o, n, s in zip(*window[1:])])
    y = rng.integers(-100, 100, x[index].shape).astype(np.int32)
    dx = check(device, y, *window)
    assert int(np.sum(x[index] * y)) == int(np.sum(x * dx))
    off = np.ones(x.shape, bool)
    off[index] = False
    assert not dx[off].any()


# ---- PyTorch ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_pytorch_slicing_backward(device, rng, dtype):
    """Autograd through x[o:o+size:step] (torch.flip for a negative step) gives dX bit for
    bit, at DirectML's window for the same slice."""
    from torch_support import torch
    x = torch.zeros((6, 9, 13), dtype=getattr(torch, dtype), requires_grad=True)
    offsets, sizes, strides = (1, 0, 2), (4, 9, 10), (2, -1, 3)
    y = x[1:5:2, :, 2:12:3].flip(1)
    dy = torch.from_numpy(slice_grad_values(rng, tuple(y.shape), dtype))
    y.backward(dy)
    got = pyvkgrad.slice_grad(dy.numpy(), x.shape, offsets, sizes, strides, device=device)
    np.testing.assert_array_equal(bits(got), bits(x.grad.numpy()))


# ---- data types, sizes, layouts -----------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_data_type_bit_for_bit(device, rng, dtype):
    """Integer extremes, float NaNs with payloads (signalling ones too), -0 and subnormals
    arrive as they were; zeros elsewhere are +0."""
    dy = slice_grad_values(rng, (5, 17, 33), dtype)
    if dy.dtype.kind == "f":
        special = {2: [0x7C01, 0xFE37, 0x8000, 0x0001],
                   4: [0x7F800001, 0xFFC12345, 0x80000000, 0x00000001]}[dy.itemsize]
        dy.reshape(-1).view(bits(dy).dtype)[:len(special)] = special
    else:
        info = np.iinfo(dtype)
        dy.reshape(-1)[:3] = [info.min, info.max, 0]
    for window in (((5, 20, 40), (0, 1, 2), (5, 17, 33), (1, 1, 1)),
                   ((7, 52, 70), (1, 2, 3), (5, 50, 66), (-1, 3, -2)),
                   ((5, 17, 33), (0, 0, 0), (5, 17, 33), (1, 1, 1))):
        check(device, dy, *window)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 31, 255, 256, 257, 1021])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.uint8], ids=str)
def test_edge_sizes(device, rng, n, dtype):
    """Windows of edge sizes and offsets along the innermost axis: vectors inside, across and
    off the window, contiguous or stepped, and tail vectors."""
    dy = slice_grad_values(rng, (3, n), dtype)
    for offset, step, extra in ((0, 1, 0), (1, 1, 5), (5, 1, 16), (3, 2, 1), (2, -1, 3),
                                (0, -3, 0)):
        size = (n - 1) * abs(step) + 1
        check(device, dy, (4, offset + size + extra), (1, offset), (3, size), (1, step))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8], ids=str)
def test_strided_tensors(device, rng, dtype):
    """A strided dY (the one-call function keeps its strides), and through the descriptor a
    strided dX: only the elements dX's strides address are written."""
    dy = slice_grad_values(rng, (6, 5, 14), dtype)[:, ::2, ::2].transpose(1, 0, 2)
    window = ((4, 11, 9), (1, 2, 0), (3, 6, 7), (1, -1, 1))
    check(device, dy, *window)
    data_type = DataType.from_numpy(dtype, "", "", DataType)
    dx = TensorDesc(data_type, (4, 11, 9), (1, 4 * 9 * 2, 4 * 2))  # transposed, padded
    desc = SliceGradDesc(TensorDesc(data_type, dy.shape), dx, *window[1:])
    assert [d.kernel for d in desc.plan(device.limits).dispatches] == ["slice_grad"]
    out = device.empty(dx)
    sentinel = np.full(dx.element_span, 77, dtype)
    out.write(np.lib.stride_tricks.as_strided(sentinel, dx.sizes,
                                              [s * sentinel.itemsize for s in dx.strides]))
    device.compile(desc)(input_gradient_tensor=device.upload(np.ascontiguousarray(dy)),
                         output_gradient_tensor=out)
    np.testing.assert_array_equal(bits(out.numpy()), bits(reference.slice_grad(dy, *window)))


# ---- the canonical window and the plans ---------------------------------------------------------

def desc_of(dy_sizes, *window, data_type=DataType.FLOAT32):
    return SliceGradDesc(TensorDesc(data_type, dy_sizes), TensorDesc(data_type, window[0]),
                         *window[1:])


def test_canonical_window():
    """Whole axes merge into the axis outside them (stepping by 1), size-1 axes go, and a
    negative stride reads dY backwards from its far end."""
    w = desc_of((32, 64, 112, 112), (32, 64, 128, 128), (0, 0, 8, 8), (32, 64, 112, 112),
                (1, 1, 1, 1)).canonical_window()
    assert w.sizes == (2048, 128, 128) and w.firsts == (0, 8, 8) and w.steps == (1, 1, 1)
    assert w.dy_sizes == (2048, 112, 112) and w.dy_strides == (112 * 112, 112, 1)
    w = desc_of((1, 3, 5), (1, 7, 5), (0, 1, 0), (1, 6, 5), (1, -2, 1)).canonical_window()
    assert w.sizes == (7, 5) and w.firsts == (2, 0) and w.steps == (2, 1)
    assert w.dy_strides == (-5, 1) and w.base == 10
    # A whole axis inside a stepped one does not merge.
    w = desc_of((3, 4), (6, 4), (0, 0), (5, 4), (2, 1)).canonical_window()
    assert w.sizes == (6, 4) and w.steps == (2, 1)


def test_plans():
    """A packed dX takes the vector kernel in one dispatch (several under a loop limit with
    one narrow workgroup); a strided dX the element kernel."""
    desc = desc_of((32, 64, 112, 112), (32, 64, 128, 128), (0, 0, 8, 8), (32, 64, 112, 112),
                   (1, 1, 1, 1))
    (d,) = desc.plan(Limits()).dispatches
    assert d.kernel == "slice_grad_packed" and d.constant("LANES_LOG2") == 0
    narrow = Limits(local_size=1, max_local_size=1, max_workgroups=1, max_loop_iterations=65535)
    assert len(desc.plan(narrow).dispatches) > 1


def test_same_bits_under_other_limits(device, rng):
    """Workgroup widths, one narrow workgroup under a loop limit (several dispatches) and
    cuts of the one-call problem beyond a small buffer limit: the same bits."""
    for dtype in (np.float16, np.int8, np.float32):
        data_type = DataType.from_numpy(dtype, "", "", DataType)
        dy = slice_grad_values(rng, (4, 33, 37), dtype)
        window = ((4, 70, 80), (0, 2, 1), (4, 65, 73), (1, -2, 2))
        want = check(device, dy, *window)
        desc = SliceGradDesc(TensorDesc(data_type, dy.shape), TensorDesc(data_type, window[0]),
                             *window[1:])
        for limits in (Limits(local_size=32), Limits(local_size=64),
                       Limits(local_size=1, max_local_size=1, max_workgroups=3,
                              max_loop_iterations=65535)):
            out = device.empty(desc.output_gradient_tensor)
            device.compile(desc, limits=limits)(input_gradient_tensor=device.upload(dy),
                                                output_gradient_tensor=out)
            np.testing.assert_array_equal(bits(out.numpy()), bits(want), err_msg=str(limits))


def test_cut_beyond_the_buffer_limit(device, rng, monkeypatch):
    """Along the axes the window covers whole the one-call function cuts a problem beyond the
    buffer limit into pieces: the same bits."""
    dy = slice_grad_values(rng, (16, 9, 40), np.float16)
    window = ((16, 9, 90), (0, 0, 3), (16, 9, 79), (1, 1, -2))
    want = check(device, dy, *window)
    monkeypatch.setenv("PYVKGRAD_MAX_BUFFER_BYTES", "2048")
    before = device.cache_info()
    got = pyvkgrad.slice_grad(dy, *window, device=device)
    after = device.cache_info()  # the pieces: one new problem, then run again on the others
    assert after.misses > before.misses and after.hits > before.hits
    np.testing.assert_array_equal(bits(got), bits(want))


# ---- errors before device work ------------------------------------------------------------------

@pytest.mark.parametrize("window, kind, message", [
    (((4, 6), (0, 0), (4, 6), (1, 0)), ValueError, r"InputWindowStrides\[1\] must not be 0"),
    (((4, 6), (0, 1), (4, 6), (1, 1)), ValueError,
     r"InputWindowOffsets\[1\] \+ InputWindowSizes\[1\] must not exceed"),
    (((4, 6), (0, 0), (4, 4), (1, 2)), ValueError,
     r"InputGradientTensor.Sizes\[1\] must not exceed 1 \+ \(InputWindowSizes - 1\) div"),
    (((4, 6), (0, 0), (4, 0), (1, 1)), ValueError, r"InputWindowSizes\[1\] must be at least 1"),
    (((4, 6), (0, 0, 0), (4, 6), (1, 1)), ValueError,
     r"InputWindowOffsets must have DimensionCount entries"),
    (((4, 6), (0, 0), (4, 6), (1, 2**31)), ValueError,
     r"InputWindowStrides\[1\] must fit DirectML's INT"),
    (((4, 6), (0, -1), (4, 6), (1, 1)), ValueError, r"InputWindowOffsets must not be negative"),
    (((4, 6), (0, 0), (4, 6), (1, 1.0)), TypeError, r"InputWindowStrides\[1\] must be an int"),
    (((4, 6, 1), (0, 0), (4, 6), (1, 1)), ValueError,
     r"OutputGradientTensor.DimensionCount must equal InputGradientTensor.DimensionCount"),
])
def test_errors_before_device_work(device, monkeypatch, window, kind, message):
    monkeypatch.setattr(OneCallCache, "run", lambda *a, **k: pytest.fail("reached the device"))
    with pytest.raises(kind, match=f"^SLICE_GRAD: {message}"):
        pyvkgrad.slice_grad(np.ones((4, 3), np.float32), *window, device=device)


def test_descriptor_errors():
    dy, dx = TensorDesc(DataType.FLOAT32, (2, 3)), TensorDesc(DataType.FLOAT16, (2, 3))
    with pytest.raises(TypeError, match="^SLICE_GRAD: OutputGradientTensor.DataType must equal"):
        SliceGradDesc(dy, dx, (0, 0), (2, 3), (1, 1))
    with pytest.raises(ValueError, match="^SLICE_GRAD: OutputGradientTensor.Strides must not"):
        SliceGradDesc(dy, TensorDesc(DataType.FLOAT32, (2, 3), (0, 1)), (0, 0), (2, 3), (1, 1))
    with pytest.raises(TypeError, match="^SLICE_GRAD: InputGradientTensor must be a TensorDesc"):
        SliceGradDesc(None, dy, (0, 0), (2, 3), (1, 1))
    desc = SliceGradDesc(dy, TensorDesc(DataType.FLOAT32, (2, 3)), (0, 0), (2, 3), (1, 1))
    with pytest.raises(ValueError, match="^SLICE_GRAD: InputWindowStrides must have"):
        dataclasses.replace(desc, input_window_strides=(1,))
