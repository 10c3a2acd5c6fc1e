"""pyvkgrad.torch.roi_align: torchvision.ops.roi_align's signature, the forward in PyTorch
operations, the backward ROI_ALIGN_GRAD on the device; against the float64 oracle (the forward
through its adjoint, the backward directly), torchvision's algorithm reimplemented in numpy
(tests/test_roi_align_grad.py), boxes as a Tensor[K, 5] or a list per image, aligned or not
(narrow boxes widened as torchvision widens them), fixed and adaptive sampling, float16, and
torchvision itself where it is installed."""

import numpy as np
import pytest

from test_roi_align_grad import torchvision_roi_align_backward
from torch_support import torch

import pyvkgrad.torch as vt
from pyvkgrad import reference
from pyvkgrad.torch import _roi_align


def random_boxes(rng, count, images, height, width, narrow=False):
    """Tensor[K, 5] float32: batch index, x1, y1, x2, y2 (partly outside the image; some
    narrower than a pixel with `narrow`)."""
    x1y1 = rng.uniform(-4, max(height, width), (count, 2))
    size = rng.uniform(0.2 if narrow else 2, 12, (count, 2))
    batch = rng.integers(0, images, (count, 1))
    return torch.tensor(np.concatenate([batch, x1y1, x1y1 + size], 1), dtype=torch.float32)


def oracle_grad(x, boxes, dy, output_size, spatial_scale, sampling_ratio, aligned):
    """The float64 oracle's dX on the regions roi_align passes the device."""
    rois, batch = _roi_align.regions(x, boxes, spatial_scale, aligned)
    dx, _ = reference.roi_align_grad(None, dy.double().numpy(), rois, batch, tuple(x.shape),
                                     **_roi_align.grad_parameters(sampling_ratio, aligned))
    return dx


@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("sampling_ratio", [-1, 0, 2])
def test_forward_and_backward_against_the_oracle(rng, aligned, sampling_ratio):
    x = torch.randn(2, 3, 11, 13, requires_grad=True)
    boxes = random_boxes(rng, 9, 2, 11, 13, narrow=True)
    y = vt.roi_align(x, boxes, (3, 2), spatial_scale=0.5, sampling_ratio=sampling_ratio,
                     aligned=aligned)
    assert y.shape == (9, 3, 3, 2) and y.dtype == torch.float32
    dy = torch.randn_like(y)
    y.backward(dy)
    want = oracle_grad(x, boxes, dy, (3, 2), 0.5, sampling_ratio, aligned)
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-5, atol=1e-6)
    # The forward is dX's adjoint: sum(dY * Y) = <dX(dY), X>.
    np.testing.assert_allclose(float((dy.double() * y.detach().double()).sum()),
                               float((want * x.detach().double().numpy()).sum()), rtol=1e-5)


@pytest.mark.parametrize("aligned", [False, True])
def test_torchvisions_algorithm(rng, aligned):
    """The backward against torchvision's CPU kernel's algorithm (numpy), narrow boxes
    included: not aligned, torchvision widens them to one pixel, and so does roi_align."""
    x = torch.randn(2, 4, 9, 12, requires_grad=True)
    boxes = random_boxes(rng, 8, 2, 9, 12, narrow=True)
    y = vt.roi_align(x, boxes, 3, spatial_scale=0.75, sampling_ratio=0, aligned=aligned)
    dy = torch.randn_like(y)
    y.backward(dy)
    want = torchvision_roi_align_backward(dy.double().numpy(), boxes.double().numpy(),
                                          tuple(x.shape), 0.75, 0, aligned)
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_reversed_and_empty_boxes_aligned(rng, sampling_ratio):
    """Aligned boxes of zero or negative size along an axis: with adaptive sampling torchvision
    samples nothing of them (ceil(length / output) <= 0), so their output is 0 and they pass on
    no gradient; with a fixed count it samples them from x1 (y1) backwards. Both as
    torchvision's algorithm, beside ordinary boxes."""
    x = torch.randn(2, 3, 9, 12, requires_grad=True)
    boxes = random_boxes(rng, 6, 2, 9, 12)
    boxes[0, [1, 3]] = boxes[0, [3, 1]]  # reversed along x
    boxes[1, [2, 4]] = boxes[1, [4, 2]]  # reversed along y
    boxes[2, 3] = boxes[2, 1]  # empty along x
    boxes[3, 1:] = torch.tensor([8.0, 7.0, 1.0, 2.0])  # reversed along both
    y = vt.roi_align(x, boxes, (2, 3), spatial_scale=0.75, sampling_ratio=sampling_ratio,
                     aligned=True)
    if sampling_ratio == 0:
        assert not y[:4].any() and y[4:].abs().sum() > 0
    dy = torch.randn_like(y)
    y.backward(dy)
    want = torchvision_roi_align_backward(dy.double().numpy(), boxes.double().numpy(),
                                          tuple(x.shape), 0.75, sampling_ratio, True)
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-4, atol=1e-5)


def test_boxes_as_a_list_and_float16(rng):
    """A list of Tensor[L, 4] per image is the Tensor[K, 5] with the images' indices; float16
    runs the backward in float32 and rounds dX once."""
    x = torch.randn(2, 3, 8, 10)
    boxes = random_boxes(rng, 6, 2, 8, 10)
    boxes[:, 0] = torch.tensor([0, 0, 0, 1, 1, 1])
    as_list = [boxes[:3, 1:], boxes[3:, 1:]]
    grads = []
    for form in (boxes, as_list):
        xg = x.clone().requires_grad_()
        y = vt.roi_align(xg, form, (2, 3), 1.0, 2)
        y.backward(torch.ones_like(y))
        grads.append(xg.grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=0)
    half = x.half().requires_grad_()
    y = vt.roi_align(half, boxes, (2, 3), 1.0, 2)
    assert y.dtype == torch.float16
    y.backward(torch.ones_like(y))
    assert half.grad.dtype == torch.float16
    np.testing.assert_allclose(half.grad.float().numpy(), grads[0].numpy(), rtol=2e-3,
                               atol=2e-3)


def test_without_grad_only_the_forward_runs(rng):
    x = torch.randn(1, 2, 6, 6)
    boxes = random_boxes(rng, 3, 1, 6, 6)
    with torch.no_grad():
        y = vt.roi_align(x.requires_grad_(), boxes, 2)
    assert not y.requires_grad and y.shape == (3, 2, 2, 2)


def test_torchvision_itself(rng):
    """torchvision.ops.roi_align's forward and backward, where torchvision is installed."""
    tv = pytest.importorskip("torchvision", reason="torchvision is not installed")
    x = torch.randn(2, 3, 11, 13)
    boxes = random_boxes(rng, 7, 2, 11, 13, narrow=True)
    for aligned in (False, True):
        for ratio in (0, 2):
            got, want = x.clone().requires_grad_(), x.clone().requires_grad_()
            y = vt.roi_align(got, boxes, (3, 2), 0.5, ratio, aligned)
            y_tv = tv.ops.roi_align(want, boxes, (3, 2), 0.5, ratio, aligned)
            torch.testing.assert_close(y, y_tv, rtol=1e-5, atol=1e-5)
            dy = torch.randn_like(y)
            y.backward(dy)
            y_tv.backward(dy)
            torch.testing.assert_close(got.grad, want.grad, rtol=1e-5, atol=1e-5)


def test_errors(rng):
    x = torch.randn(1, 2, 6, 6, requires_grad=True)
    boxes = random_boxes(rng, 3, 1, 6, 6)
    for args, message in [
            ((x, boxes[:, 1:], 2), r"boxes must be a Tensor\[K, 5\]"),
            ((x, [boxes[:, :3]], 2), r"boxes\[0\] must be a Tensor\[L, 4\]"),
            ((x, boxes + torch.tensor([1.0, 0, 0, 0, 0]), 2), "the boxes. batch indices must"),
            ((x, boxes, (2, 0)), "output_size must be"),
            ((x, boxes, (2,)), "output_size must be"),
            ((x, boxes, 2.0), "output_size must be"),
            ((x, boxes * torch.tensor([1.0, 1, 1, float("nan"), 1]), 2),
             "the boxes. coordinates .times spatial_scale. must be finite"),
            ((x, boxes + torch.tensor([0.0, 0, 0, 0, float("inf")]), 2),
             "the boxes. coordinates .times spatial_scale. must be finite"),
            ((x[0], boxes, 2), "input must be 4-D")]:
        with pytest.raises(ValueError, match=f"^pyvkgrad.torch.roi_align: {message}"):
            vt.roi_align(*args)
    with pytest.raises(TypeError, match="^pyvkgrad.torch.roi_align: torch.float64"):
        vt.roi_align(x.double(), boxes, 2)


def test_boxes_below_a_pixel_and_non_finite_edges():
    """Not aligned, a box narrower than a pixel is widened to one as torchvision does: one
    sample for an output of 1, where x1 + 1 rounding up in float32 (1.4) took two; and a
    sample outside the image is 0 even beside an infinite edge pixel (not 0 * Inf)."""
    x = torch.tensor([[[[0.0, 0.0, 10.0, 0.0]]]], requires_grad=True)
    boxes = torch.tensor([[0.0, 1.4, 0.0, 1.4, 0.0]])
    y = vt.roi_align(x, boxes, 1, 1.0, -1, False)
    y.backward(torch.ones_like(y))
    # torchvision: one sample at x = 1.9: 10 * 0.9, dX [0, 0.1, 0.9, 0] (within float32)
    np.testing.assert_allclose(y.detach().numpy().ravel(), [9.0], rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy().ravel(), [0, 0.1, 0.9, 0], atol=1e-6)
    image = torch.tensor([[[[1.0, 2.0], [3.0, float("inf")]]]], requires_grad=True)
    y = vt.roi_align(image, torch.tensor([[0.0, 10, 10, 11, 11]]), 1, 1.0, 2, False)
    assert torch.equal(y.detach(), torch.zeros(1, 1, 1, 1))


def test_output_size_takes_any_integer_type(rng):
    """output_size as a NumPy integer or a 0-d tensor, as an int."""
    x = torch.randn(1, 2, 6, 6, requires_grad=True)
    boxes = random_boxes(rng, 3, 1, 6, 6)
    want = vt.roi_align(x, boxes, (2, 2))
    for size in (np.int64(2), torch.tensor(2), (np.int32(2), 2)):
        assert torch.equal(vt.roi_align(x, boxes, size), want)


@pytest.mark.parametrize("slab", [1, 5, 37, 200])
def test_the_forward_in_slabs(rng, monkeypatch, slab):
    """A region's samples taken a few at a time (FORWARD_SLAB_SAMPLES: a slab under a row, a
    bin's rows split between slabs, a few channels at once) give the forward taken whole,
    within float32's summation order; and the backward is unchanged. A large box (more than
    a hundred samples a bin) is among them."""
    x = torch.randn(2, 5, 9, 12, requires_grad=True)
    boxes = torch.cat([random_boxes(rng, 6, 2, 9, 12, narrow=True),
                       torch.tensor([[1.0, -30.0, -20.0, 40.0, 35.0]])])
    for aligned, ratio in ((False, -1), (True, 3)):
        whole = vt.roi_align(x, boxes, (3, 2), 0.5, ratio, aligned)
        dy = torch.randn_like(whole)
        want_grad, = torch.autograd.grad(whole, x, dy)
        with monkeypatch.context() as m:
            m.setattr(_roi_align, "FORWARD_SLAB_SAMPLES", slab)
            got = vt.roi_align(x, boxes, (3, 2), 0.5, ratio, aligned)
            grad, = torch.autograd.grad(got, x, dy)
        torch.testing.assert_close(got, whole, rtol=1e-5, atol=1e-6)
        assert torch.equal(grad, want_grad)
