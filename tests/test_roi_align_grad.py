"""ROI_ALIGN_GRAD: the worked examples, torchvision's roi_align backward (reimplemented in numpy
here, and torchvision itself where installed), edge sizes and float16 against the oracle, the
rules where DirectML is silent (ties, batch indices, regions outside), the same bits under every
plan, and errors before any device work. The operator table's tests cover the rest."""

import dataclasses
import math

import numpy as np
import pytest

import pyvkgrad
from pyvkgrad import operators, reference
from pyvkgrad._cases_roi_align import roi_align_case, roi_align_describe
from pyvkgrad.one_call_cache import OneCallCache
from pyvkgrad.ops import roi_align_grad as roi_align_grad_module
from pyvkgrad.ops.roi_align_grad import RoiAlignGradDesc
from pyvkgrad.plan import Limits
from pyvkgrad.tensor import DataType, TensorDesc

RECORD = operators.BY_NAME["roi_align_grad"]
DTYPES = [np.float32, np.float16]


def run_compiled(device, case, limits=None):
    """The case's descriptor compiled with `limits` (the device's by default), run once: its
    outputs, dX and (where the case asks for it) dROI."""
    desc = roi_align_describe(case)
    op = device.compile(desc, limits)
    x, dy, roi, batch, _ = case.args
    values = dict(input_tensor=x, input_gradient_tensor=dy, roi_tensor=roi,
                  batch_indices_tensor=batch)
    tensors = {name: device.upload(values[name]) if name in values else device.empty(d)
               for name, (d, _) in desc.tensor_fields()}
    op(**tensors)
    return tuple(tensors[name].numpy() for name in ("output_gradient_tensor",
                                                    "output_roi_gradient_tensor")
                 if name in tensors)


def check(device, case, dtype):
    got = RECORD.run(case, device)
    operators.assert_close(RECORD, got, case.args, case.kwargs, dtype)
    return got[0]


# ---- the worked examples ------------------------------------------------------------------------

RA2_X = np.array([[1, 2, 4], [3, 5, 9], [0, 6, 2]]).reshape(1, 1, 3, 3)
RA2_ROI = np.array([[0.5, 0.25, 2.5, 1.75]])
RA2_DY = np.array([1, 2]).reshape(1, 1, 1, 2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_ra1_the_pages_example(device, dtype):
    """Nearest, average, one sample per output: the two ties at 1/2 round down (half to even)."""
    x = np.arange(1, 17).reshape(1, 1, 4, 4).astype(dtype)
    rois = np.array([[0, 0, 2, 2], [2, 0, 4, 2], [0, 2, 2, 4], [2, 2, 4, 4]], dtype)
    dy = np.arange(1, 13).reshape(4, 1, 1, 3).astype(dtype)
    dx, _ = pyvkgrad.roi_align_grad(x, dy, rois, np.zeros(4, np.uint32), (1, 1, 4, 4),
                                    interpolation_mode="nearest_neighbor",
                                    maximum_samples_per_output=1, device=device)
    np.testing.assert_array_equal(dx[0, 0], [[3, 3, 9, 6], [0, 0, 0, 0], [15, 9, 21, 12],
                                             [0, 0, 0, 0]])
    assert dx.dtype == dtype


RA2_DROI = {"average": [2.625, 5.25, 4.875, 5.25], "max": [3.28125, 2.625, 6.09375, 7.875]}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction, want", [
    ("average", [[0.25, 0.75, 0.5], [0.25, 0.75, 0.5], [0, 0, 0]]),
    ("max", [[0.0625, 0.1875, 0.125], [0.4375, 1.3125, 0.875], [0, 0, 0]])])
def test_ra2_ra3_linear(device, dtype, reduction, want):
    """Sx = 1, Sy = ceil(1.5) = 2; MAX: the y = 0.875 samples win. dX exact in both types, dROI
    exact in float32 and correctly rounded in float16; without roi_gradient dROI is None."""
    args = (RA2_X.astype(dtype), RA2_DY.astype(dtype), RA2_ROI.astype(dtype),
            np.zeros(1, np.uint32), (1, 1, 3, 3))
    dx, droi = pyvkgrad.roi_align_grad(*args, reduction_function=reduction, roi_gradient=True,
                                       device=device)
    np.testing.assert_array_equal(dx[0, 0], want)
    np.testing.assert_array_equal(droi, np.array([RA2_DROI[reduction]]).astype(dtype))
    assert droi.dtype == dtype and droi.shape == (1, 4)
    alone, none = pyvkgrad.roi_align_grad(*args, reduction_function=reduction, device=device)
    assert none is None
    np.testing.assert_array_equal(alone, dx)


@pytest.mark.parametrize("reduction, want", [("average", [2.625, 5.25, 4.875, 5.25]),
                                             ("max", [3.28125, 2.625, 6.09375, 7.875])])
def test_the_oracles_region_gradient(reduction, want):
    """The oracle's dROI reproduces RA-2 and RA-3."""
    _, droi = reference.roi_align_grad(RA2_X, RA2_DY, RA2_ROI, [0], (1, 1, 3, 3),
                                       reduction_function=reduction, roi_gradient=True)
    np.testing.assert_allclose(droi[0], want, rtol=1e-12)


def central_differences(x, dy, rois, batch, **kw):
    """d sum(dY * forward) / dROI by central differences in float64, the forward as the adjoint
    of dX (<dX(dY), X> = sum(dY * Y), MAX's selection fixed by X); float32 coordinates, so
    steps of 1e-3."""
    def loss(r):
        return np.sum(reference.roi_align_grad(x, dy, r, batch, x.shape, **kw)[0] * x)
    numeric = np.zeros(rois.shape)
    for index in np.ndindex(*rois.shape):
        up, down = rois.copy(), rois.copy()
        up[index] += 1e-3
        down[index] -= 1e-3
        numeric[index] = (loss(up) - loss(down)) / 2e-3
    return numeric


def test_the_oracles_region_gradient_by_central_differences(rng):
    """dROI of the oracle against central differences, two samples per axis, AVERAGE and MAX."""
    x = rng.standard_normal((1, 2, 6, 7))
    dy = rng.standard_normal((2, 2, 2, 3))
    rois = np.array([[1.3, 0.7, 5.1, 4.4], [5.6, 4.2, 1.9, 0.8]])  # the second mirrored
    for reduction in ("average", "max"):
        kw = dict(reduction_function=reduction, minimum_samples_per_output=2,
                  maximum_samples_per_output=2)
        _, droi = reference.roi_align_grad(x, dy, rois, [0, 0], x.shape, roi_gradient=True,
                                           **kw)
        numeric = central_differences(x, dy, rois, [0, 0], **kw)
        assert np.all(np.abs(numeric - droi) < 2e-3 * (1 + np.abs(droi))), reduction


@pytest.mark.parametrize("dtype", DTYPES)
def test_region_gradient_by_central_differences(device, rng, dtype):
    """The device's dROI against central differences of the float64 forward, regions partly
    outside, one mirrored, AVERAGE and MAX, two samples per axis and as many as the regions
    ask; NEAREST's dROI is 0."""
    x = rng.standard_normal((2, 3, 7, 8)).astype(dtype)
    dy = rng.standard_normal((3, 3, 2, 3)).astype(dtype)
    rois = np.array([[1.3, 0.7, 5.1, 4.4], [6.6, 5.2, 1.9, 0.8], [-1.7, 3.3, 4.2, 9.4]], dtype)
    batch = np.array([0, 1, 1], np.uint32)
    for reduction, samples in (("average", 2), ("max", 2), ("average", None), ("max", None)):
        kw = dict(reduction_function=reduction)
        if samples:
            kw.update(minimum_samples_per_output=samples, maximum_samples_per_output=samples)
        _, droi = pyvkgrad.roi_align_grad(x, dy, rois, batch, x.shape, roi_gradient=True,
                                          device=device, **kw)
        numeric = central_differences(*(a.astype(np.float64) for a in (x, dy, rois)), batch,
                                      **kw)
        assert np.all(np.abs(numeric - droi) < 4e-3 * (1 + np.abs(numeric))), reduction
        _, zero = pyvkgrad.roi_align_grad(x, dy, rois, batch, x.shape, roi_gradient=True,
                                          interpolation_mode="nearest_neighbor", device=device,
                                          **kw)
        np.testing.assert_array_equal(zero, 0)


@pytest.mark.parametrize("reduction", ["average", "max"])
def test_a_descriptor_with_dROI_alone(device, rng, reduction):
    """OutputGradientTensor None: the plan runs dROI's kernels only (and MAX's selection),
    bitwise the dROI of a descriptor with both outputs."""
    x = rng.standard_normal((2, 3, 9, 11)).astype(np.float32)
    dy = rng.standard_normal((4, 3, 2, 3)).astype(np.float32)
    rois = np.array([[1.3, 0.7, 5.1, 4.4], [6.6, 5.2, 1.9, 0.8], [-1.7, 3.3, 4.2, 9.4],
                     [2, 2, 8, 7]], np.float32)
    batch = np.array([0, 1, 1, 0], np.uint32)
    case = operators.Case((x, dy, rois, batch, x.shape),
                          dict(reduction_function=reduction, roi_gradient=True))
    both = roi_align_describe(case)
    alone = dataclasses.replace(both, output_gradient_tensor=None)
    kernels = [d.kernel for d in alone.plan(Limits()).dispatches]
    assert kernels == (["roi_align_grad_select"] if reduction == "max" else []) + [
        "roi_align_grad_roi_partials", "roi_align_grad_roi"]
    op = device.compile(alone)
    values = dict(input_tensor=x, input_gradient_tensor=dy, roi_tensor=rois,
                  batch_indices_tensor=batch)
    tensors = {name: device.upload(values[name]) if name in values else device.empty(d)
               for name, (d, _) in alone.tensor_fields()}
    op(**tensors)
    np.testing.assert_array_equal(tensors["output_roi_gradient_tensor"].numpy(),
                                  run_compiled(device, case)[1])


# ---- PyTorch's roi_align -----------------------------------------------------------------------

def torchvision_roi_align_backward(dy, boxes, sizes, spatial_scale, sampling_ratio, aligned):
    """torchvision.ops.roi_align's backward (its CPU kernel's algorithm), in float64 numpy:
    boxes {K, 5} [batch, x1, y1, x2, y2]."""
    dx = np.zeros(sizes)
    _, _, height, width = sizes
    _, _, ph_n, pw_n = dy.shape
    offset = 0.5 if aligned else 0.0
    for n, (b, x1, y1, x2, y2) in enumerate(boxes):
        start_w, start_h = x1 * spatial_scale - offset, y1 * spatial_scale - offset
        roi_w, roi_h = x2 * spatial_scale - offset - start_w, y2 * spatial_scale - offset - start_h
        if not aligned:
            roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
        bin_h, bin_w = roi_h / ph_n, roi_w / pw_n
        grid_h = sampling_ratio if sampling_ratio > 0 else math.ceil(roi_h / ph_n)
        grid_w = sampling_ratio if sampling_ratio > 0 else math.ceil(roi_w / pw_n)
        count = max(grid_h * grid_w, 1)
        for ph in range(ph_n):
            for pw in range(pw_n):
                for iy in range(grid_h):
                    y = start_h + ph * bin_h + (iy + 0.5) * bin_h / grid_h
                    for ix in range(grid_w):
                        xx = start_w + pw * bin_w + (ix + 0.5) * bin_w / grid_w
                        if y < -1 or y > height or xx < -1 or xx > width:
                            continue
                        yc, xc = max(y, 0.0), max(xx, 0.0)
                        y_low, x_low = int(yc), int(xc)
                        if y_low >= height - 1:
                            y_low = y_high = height - 1
                            yc = y_low
                        else:
                            y_high = y_low + 1
                        if x_low >= width - 1:
                            x_low = x_high = width - 1
                            xc = x_low
                        else:
                            x_high = x_low + 1
                        ly, lx = yc - y_low, xc - x_low
                        g = dy[n, :, ph, pw] / count
                        dx[int(b), :, y_low, x_low] += g * (1 - ly) * (1 - lx)
                        dx[int(b), :, y_low, x_high] += g * (1 - ly) * lx
                        dx[int(b), :, y_high, x_low] += g * ly * (1 - lx)
                        dx[int(b), :, y_high, x_high] += g * ly * lx
    return dx


def torchvision_parameters(spatial_scale, sampling_ratio, aligned):
    """ROI_ALIGN_GRAD's parameters for torchvision's roi_align (LINEAR, AVERAGE)."""
    return dict(spatial_scale_x=spatial_scale, spatial_scale_y=spatial_scale,
                input_pixel_offset=0.5 if aligned else 0.0, output_pixel_offset=-0.5,
                minimum_samples_per_output=sampling_ratio or 1,
                maximum_samples_per_output=sampling_ratio or 2**32 - 1)


@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_torchvisions_algorithm(device, rng, aligned, sampling_ratio):
    """Boxes of at least one scaled pixel (torchvision's aligned=False enlarges smaller ones,
    ROI_ALIGN_GRAD does not), partly outside the image, on two images."""
    sizes, scale = (2, 3, 11, 13), 0.5
    x1y1 = rng.uniform(-6, 22, (7, 2))
    wh = rng.uniform(2.5, 14, (7, 2))
    batch = rng.integers(0, 2, 7)
    boxes = np.concatenate([batch[:, None], x1y1, x1y1 + wh], 1).astype(np.float32)
    dy = rng.standard_normal((7, 3, 3, 2)).astype(np.float32)
    want = torchvision_roi_align_backward(dy.astype(np.float64), boxes.astype(np.float64), sizes,
                                          scale, sampling_ratio, aligned)
    got, _ = pyvkgrad.roi_align_grad(None, dy, boxes[:, 1:], batch.astype(np.uint32), sizes,
                                     **torchvision_parameters(scale, sampling_ratio, aligned),
                                     device=device)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_torchvision_itself(device, rng):
    """torchvision.ops.roi_align's own backward, where torchvision is installed."""
    torch = pytest.importorskip("torch")
    tv = pytest.importorskip("torchvision", reason="torchvision is not installed")
    x = torch.randn(2, 3, 11, 13, dtype=torch.float32, requires_grad=True)
    x1y1 = torch.rand(5, 2) * 18 - 4
    boxes = torch.cat([torch.randint(0, 2, (5, 1)).float(), x1y1, x1y1 + 2 + 10 * torch.rand(5, 2)],
                      1)
    for aligned in (False, True):
        x.grad = None
        y = tv.ops.roi_align(x, boxes, (3, 2), spatial_scale=0.5, sampling_ratio=0,
                             aligned=aligned)
        dy = torch.randn_like(y)
        y.backward(dy)
        got, _ = pyvkgrad.roi_align_grad(None, dy.numpy(), boxes[:, 1:].numpy(),
                                         boxes[:, 0].numpy().astype(np.uint32), tuple(x.shape),
                                         **torchvision_parameters(0.5, 0, aligned), device=device)
        np.testing.assert_allclose(got, x.grad.numpy(), rtol=1e-5, atol=1e-5)


# ---- against the oracle --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (1, 1, 1, 257), (1, 2, 256, 1), (2, 3, 7, 5),
                                   (1, 1, 31, 255), (3, 1, 2, 13)])
def test_edge_sizes(device, rng, dtype, shape):
    for _ in range(3):
        check(device, roi_align_case(rng, shape, dtype), dtype)


def test_regions_outside_and_batch_indices_out_of_range(device, rng):
    """A region wholly outside reads nothing; partly outside, only its samples inside count;
    a batch index outside [0, B) (B, 2^32 - 1) skips its region."""
    x = rng.standard_normal((2, 2, 6, 5)).astype(np.float32)
    dy = rng.standard_normal((5, 2, 2, 2)).astype(np.float32)
    rois = np.array([[-9, -9, -3, -4], [-2, -3, 2.5, 3.1], [3, 4, 9, 11], [1, 1, 3, 3],
                     [1, 1, 3, 3]], np.float32)
    batch = np.array([0, 1, 0, 2, 2**32 - 1], np.uint32)
    for reduction in ("average", "max"):
        case = operators.Case((x, dy, rois, batch, x.shape),
                              dict(reduction_function=reduction, roi_gradient=True))
        got, droi = RECORD.run(case, device)
        operators.assert_close(RECORD, (got, droi), case.args, case.kwargs, np.float32)
        alone, droi_alone = pyvkgrad.roi_align_grad(x, dy[1:3], rois[1:3], batch[1:3], x.shape,
                                                    reduction_function=reduction,
                                                    roi_gradient=True, device=device)
        np.testing.assert_array_equal(got, alone)  # regions 0, 3 and 4 add nothing
        np.testing.assert_array_equal(droi[1:3], droi_alone)
        np.testing.assert_array_equal(droi[[0, 3, 4]], 0)  # and have dROI rows 0
        assert np.any(droi[1:3] != 0)


@pytest.mark.parametrize("reduction", ["average", "max"])
def test_every_region_count_shares_the_pipelines(device, rng, reduction):
    """The region count R (dY's Sizes[0]) is a push constant, not a specialization constant:
    after the first call, operators of other counts compile no pipeline (a training step's
    count often changes; each new one compiled every kernel, about 125 ms on lavapipe), and
    each still matches the oracle."""
    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    runtime = device.runtime()
    made = []
    for regions in (4, 5, 1, 7, 13):
        corners = np.sort(rng.uniform(-1, 9, (regions, 2, 2)), axis=1)
        rois = corners.transpose(0, 2, 1).reshape(regions, 4)[:, [0, 2, 1, 3]]
        # (x1, y1, x2, y2), row-major: a column-major ROI's coordinate stride is R, and strides
        # stay specialization constants
        rois = np.ascontiguousarray(rois, np.float32)
        batch = rng.integers(0, 2, regions).astype(np.uint32)
        dy = rng.standard_normal((regions, 3, 2, 3)).astype(np.float32)
        case = operators.Case((x, dy, rois, batch, x.shape),
                              dict(reduction_function=reduction, roi_gradient=True))
        before = runtime.pipelines_made
        got = RECORD.run(case, device)
        made.append(runtime.pipelines_made - before)
        operators.assert_close(RECORD, got, case.args, case.kwargs, np.float32)
    assert made[1:] == [0] * 4, made


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_droi_along_a_clamped_axis_is_zero_beside_non_finite_taps(device, bad):
    """dROI's gy is 0 where a sample's y was clamped (an image one row high: every y is), a
    choice, not a product: 0 beside a NaN or Inf tap, in the device and in the oracle; x
    takes the NaN."""
    x = np.array([[[[1.0, bad]]]], np.float32)
    dy = np.ones((1, 1, 1, 1), np.float32)
    roi = np.array([[0.0, 0.5, 2.0, 1.5]], np.float32)  # y 0.5 > H - 1 = 0: clamped
    batch = np.zeros(1, np.uint32)
    kwargs = dict(reduction_function="average", roi_gradient=True)
    _, droi = pyvkgrad.roi_align_grad(x, dy, roi, batch, x.shape, device=device, **kwargs)
    _, want = reference.roi_align_grad(x, dy, roi, batch, x.shape, **kwargs)
    for got in (droi, want):
        assert np.isnan(got[0, [0, 2]]).all() and np.array_equal(got[0, [1, 3]], [0, 0])


def test_regions_whose_length_overflows(device):
    """Finite corners whose difference overflows float32 (L = +-Inf, so d = +-Inf): with
    OutputPixelOffset 0 the first sample's (k - OutputPixelOffset) d would be 0 * Inf = NaN,
    the others +-Inf. Such a region reads nothing, on either axis, ascending or mirrored;
    with dROI rows of 0. (A NaN coordinate once read pixel 0.)"""
    x = np.ones((1, 1, 4, 5), np.float32)
    dy = np.ones((1, 1, 2, 2), np.float32)
    for roi in ([-3e38, 1, 3e38, 3], [3e38, 1, -3e38, 3], [1, -3e38, 3, 3e38],
                [-2e38, -2e38, 2e38, 2e38]):
        for mode in ("linear", "nearest_neighbor"):
            for reduction in ("average", "max"):
                dx, droi = pyvkgrad.roi_align_grad(
                    x, dy, np.array([roi], np.float32), np.zeros(1, np.uint32), x.shape,
                    interpolation_mode=mode, reduction_function=reduction,
                    output_pixel_offset=0.0, maximum_samples_per_output=4, roi_gradient=True,
                    device=device)
                np.testing.assert_array_equal(dx, 0, err_msg=f"{roi} {mode} {reduction}")
                np.testing.assert_array_equal(droi, 0)


def test_max_ties_go_to_the_first_sample(device):
    """X constant: every sample ties, the first of each output (ky, kx) takes dY. Nearest, two
    samples a side at 0.5 and 2.5: indices 0 and 2 (2.5 rounds half to even, down)."""
    x = np.ones((1, 1, 4, 4), np.float32)
    dy = np.array([[[[5.0]]]], np.float32)
    roi = np.array([[0, 0, 4, 4]], np.float32)
    for mode in ("nearest_neighbor", "linear"):
        dx, _ = pyvkgrad.roi_align_grad(x, dy, roi, np.zeros(1, np.uint32), (1, 1, 4, 4),
                                        reduction_function="max", interpolation_mode=mode,
                                        minimum_samples_per_output=2, maximum_samples_per_output=2,
                                        device=device)
        want = np.zeros((4, 4))
        if mode == "nearest_neighbor":
            want[0, 0] = 5  # the first sample, at (0.5, 0.5): roundEven -> (0, 0)
        else:
            want[0:2, 0:2] = 5 * 0.25  # bilinear taps of (0.5, 0.5)
        np.testing.assert_array_equal(dx[0, 0], want)
        avg, _ = pyvkgrad.roi_align_grad(x, dy, roi, np.zeros(1, np.uint32), (1, 1, 4, 4),
                                         interpolation_mode="nearest_neighbor",
                                         minimum_samples_per_output=2,
                                         maximum_samples_per_output=2, device=device)
        # Average, nearest: samples at 0.5 and 2.5 read indices 0 and 2 (not 1 and 3).
        np.testing.assert_array_equal(avg[0, 0], np.outer([1, 0, 1, 0], [1, 0, 1, 0]) * 1.25)


# ---- the same bits under every plan ------------------------------------------------------------

def crowded_case(rng, dtype, reduction, mode, roi_gradient=False):
    """Many samples on few pixels: Minimum 5 on small and empty regions (up to 15 rows and
    columns of samples reach one pixel), so that tiny loop limits need every kind of window."""
    x = rng.standard_normal((2, 3, 5, 6)).astype(dtype)
    dy = rng.standard_normal((4, 3, 3, 3)).astype(dtype)
    rois = np.array([[1.2, 1.1, 1.7, 2.0], [2, 2, 2, 2], [-1, 0.5, 7, 4.5], [4.2, 3.9, 1.1, 0.3]],
                    dtype)
    batch = np.array([0, 1, 1, 0], np.uint32)
    return operators.Case((x, dy, rois, batch, x.shape),
                          dict(reduction_function=reduction, interpolation_mode=mode,
                               minimum_samples_per_output=5, maximum_samples_per_output=6,
                               roi_gradient=roi_gradient))


@pytest.mark.parametrize("dtype, reduction, mode", [
    (np.float32, "average", "linear"), (np.float32, "max", "linear"),
    (np.float32, "average", "nearest_neighbor"), (np.float32, "max", "nearest_neighbor"),
    (np.float16, "max", "linear")], ids=str)
def test_same_bits_under_every_plan(device, rng, dtype, reduction, mode):
    """Workgroup widths 1 to 256, few workgroups, and loop limits that split the sums into
    windows of regions, of one region's rows, and of one row's columns (more contributions per
    element than the limit), and dROI's sums into windows of samples and of partial sums:
    bitwise the default plan's result (dX and dROI), itself within the oracle's tolerance; and
    so without the tables of shares and of the regions' axes (buffer limits too small for
    them)."""
    case = crowded_case(rng, dtype, reduction, mode, roi_gradient=True)
    operators.assert_close(RECORD, run_compiled(device, case), case.args, case.kwargs, dtype)
    base = run_compiled(device, case, Limits())
    desc = roi_align_describe(case)
    windows = set()
    bits = np.uint16 if dtype == np.float16 else np.uint32
    for wg, groups, loops in ((32, 65535, 0), (64, 3, 0), (256, 1, 0), (1, 2, 0), (8, 4, 2000),
                              (16, 65535, 400), (4, 65535, 190), (2, 65535, 178)):
        limits = Limits(local_size=wg, max_local_size=wg, max_workgroups=groups,
                        max_loop_iterations=loops)
        windows.add(len(desc.plan(limits).dispatches))
        for name, got, want in zip(("dX", "dROI"), run_compiled(device, case, limits), base):
            np.testing.assert_array_equal(got.view(bits), want.view(bits),
                                          err_msg=f"{name}: local size {wg}, {groups} "
                                                  f"workgroups, loop limit {loops}")
    assert max(windows) > 50  # the tiny limits did split the work
    # No buffer for the shares' table (256 bytes), nor for the regions' axes (64): the gather
    # computes each term's share from dY, and each region's axes, itself.
    assert "roi_align_grad_shares" in [d.kernel for d in desc.plan(Limits()).dispatches]
    for size, axes in ((256, True), (64, False)):
        limits = Limits(max_storage_buffer_range=size)
        plan = desc.plan(limits)
        assert "roi_align_grad_shares" not in [d.kernel for d in plan.dispatches]
        assert plan.dispatches[0].constant("STORED_AXES") == axes
        for name, got, want in zip(("dX", "dROI"), run_compiled(device, case, limits), base):
            np.testing.assert_array_equal(got.view(bits), want.view(bits),
                                          err_msg=f"{name}: without the shares' table "
                                                  f"(buffer limit {size})")


def test_scratch_within_the_buffer_limit():
    """Every scratch buffer of the plan fits the buffer limit where the tensors do: the
    regions' axes and the shares' table are left out (the gather computes them) rather than
    the problem refused. 30 regions of one channel over a 16 x 16 image, a 1 KiB limit."""
    x = np.zeros((1, 1, 16, 16), np.float32)
    case = operators.Case((x, np.zeros((30, 1, 1, 1), np.float32),
                           np.zeros((30, 4), np.float32), np.zeros(30, np.uint32), x.shape), {})
    plan = roi_align_describe(case).plan(Limits(max_storage_buffer_range=1024))
    assert max(s.nbytes for s in plan.scratch) <= 1024, plan.scratch


def test_droi_sums_in_passes_and_windows(device, rng):
    """dROI's second pass: 3 * 8 * 5 = 120 partial sums per region, added by one workgroup per
    region in passes of its width, under loop limits in windows of them (continued through the
    accumulator), with more regions than workgroups: bitwise the default plan's dROI."""
    dtype = np.float32
    x = rng.standard_normal((2, 8, 9, 11)).astype(dtype)
    dy = rng.standard_normal((5, 8, 3, 5)).astype(dtype)
    rois = np.array([[1.3, 0.7, 5.1, 4.4], [6.6, 5.2, 1.9, 0.8], [-1.7, 3.3, 4.2, 9.4],
                     [2, 2, 8, 7], [0.2, 0.1, 10.5, 8.7]], dtype)
    batch = np.array([0, 1, 1, 0, 1], np.uint32)
    case = operators.Case((x, dy, rois, batch, x.shape), dict(roi_gradient=True))
    base = run_compiled(device, case, Limits())
    operators.assert_close(RECORD, base, case.args, case.kwargs, dtype)
    desc = roi_align_describe(case)
    bits = np.uint16 if dtype == np.float16 else np.uint32
    spans = set()
    for wg, groups, loops in ((1, 65535, 0), (4, 2, 0), (16, 65535, 0), (256, 3, 0),
                              (4, 65535, 178), (32, 2, 190)):
        limits = Limits(local_size=wg, max_local_size=wg, max_workgroups=groups,
                        max_loop_iterations=loops)
        sums = [d for d in desc.plan(limits).dispatches if d.kernel == "roi_align_grad_roi"]
        assert all(d.constant("WG") == wg for d in sums)
        spans.add(len({dict(d.push)["item_begin"] for d in sums}))
        np.testing.assert_array_equal(run_compiled(device, case, limits)[1].view(bits),
                                      base[1].view(bits),
                                      err_msg=f"local size {wg}, {groups} workgroups, "
                                              f"loop limit {loops}")
    assert max(spans) > 1  # the limits did window the sums


@pytest.mark.parametrize("reduction", ["average", "max"])
def test_the_tiles_region_lists_change_no_bits(device, rng, reduction, monkeypatch):
    """150 regions over two 29 x 37 images: the gather visits each 8 x 8 tile's list of
    regions; bitwise the same with one tile per image (the lists as long as the image's
    regions), with lists built in windows of regions under a loop limit, and under other
    workgroup widths; within the oracle's tolerance."""
    x = rng.standard_normal((2, 1, 29, 37)).astype(np.float32)
    dy = rng.standard_normal((150, 1, 2, 3)).astype(np.float32)
    x1y1 = rng.uniform(-5, 35, (150, 2))
    rois = np.concatenate([x1y1, x1y1 + rng.uniform(-3, 12, (150, 2))], 1).astype(np.float32)
    batch = rng.integers(0, 3, 150).astype(np.uint32)  # 2: outside [0, B)
    case = operators.Case((x, dy, rois, batch, x.shape), dict(reduction_function=reduction))
    base = run_compiled(device, case)
    operators.assert_close(RECORD, base, case.args, case.kwargs, np.float32)
    desc = roi_align_describe(case)
    windows = [d for d in desc.plan(Limits(max_loop_iterations=190)).dispatches
               if d.kernel == "roi_align_grad_tiles"]
    assert len(windows) > 1 and desc.plan(Limits()).dispatches[0].constant("TILE") == 8
    for limits in (Limits(max_loop_iterations=190), Limits(local_size=16, max_local_size=16)):
        np.testing.assert_array_equal(run_compiled(device, case, limits)[0].view(np.uint32),
                                      base[0].view(np.uint32))
    monkeypatch.setattr(roi_align_grad_module, "TILE_LIST_BYTES", 0)
    assert desc.plan(Limits()).dispatches[0].constant("TILE") == 64  # one tile per image
    np.testing.assert_array_equal(run_compiled(device, case, Limits())[0].view(np.uint32),
                                  base[0].view(np.uint32))


def test_plans_count_their_loops():
    """Under a loop limit the gather's windows grow finer as the limit shrinks, its last window
    stores dX (after the regions' boxes and the tiles' lists), and a limit too small for one
    region's search is refused by name (RuntimeError: a device limit, as every operator's plan
    raises it)."""
    case = crowded_case(np.random.default_rng(0), np.float32, "average", "linear")
    desc = roi_align_describe(case)
    counts = [sum(d.kernel == "roi_align_grad"
                  for d in desc.plan(Limits(max_loop_iterations=n)).dispatches)
              for n in (0, 65535, 400, 190, 178)]
    assert counts[0] == counts[1] == 1 and counts[2] < counts[3] < counts[4]
    last = desc.plan(Limits(max_loop_iterations=178)).dispatches[-1]
    assert dict(last.push)["last_window"] == 1
    with pytest.raises(RuntimeError, match="^ROI_ALIGN_GRAD: Limits.max_loop_iterations is "
                                           "too small"):
        desc.plan(Limits(max_loop_iterations=150))


def test_too_many_windows_refused_from_their_count():
    """A Minimum of up to 2^24 samples per output side is valid, but under a loop limit its
    windows would need billions of dispatches: the plan refuses from their count at once,
    before listing any (it listed them first: 29 s and 1.6 GiB at 2^17, out of memory at
    2^24). A problem just within the limit still plans."""
    import time

    f32 = pyvkgrad.DataType.FLOAT32
    for k, refused in ((12, False), (17, True), (24, True)):
        desc = RoiAlignGradDesc(
            None, pyvkgrad.TensorDesc(f32, (1, 1, 1, 1)), pyvkgrad.TensorDesc(f32, (1, 4)),
            pyvkgrad.TensorDesc(pyvkgrad.DataType.UINT32, (1,)),
            pyvkgrad.TensorDesc(f32, (1, 1, 4, 4)), None, minimum_samples_per_output=2**k,
            maximum_samples_per_output=2**k)
        start = time.perf_counter()
        if refused:
            with pytest.raises(ValueError, match="MinimumSamplesPerOutput asks for more "
                                                 "samples per output"):
                desc.plan(Limits(max_loop_iterations=65535))
        else:
            assert len(desc.plan(Limits(max_loop_iterations=65535)).dispatches) > 1
        assert time.perf_counter() - start < 5


# ---- errors before any device work -------------------------------------------------------------

def test_errors_before_device_work(device, rng, monkeypatch):
    monkeypatch.setattr(OneCallCache, "run", lambda *a, **k: pytest.fail("reached the device"))
    x = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    dy = rng.standard_normal((3, 2, 2, 2)).astype(np.float32)
    roi = np.zeros((3, 4), np.float32)
    batch = np.zeros(3, np.uint32)

    def call(*args, **kw):
        return pyvkgrad.roi_align_grad(*args, device=device, **kw)

    cases = [
        ((None, dy, roi, batch, x.shape), dict(reduction_function="max"), TypeError,
         "InputTensor is required with ReductionFunction MAX"),
        ((x, dy, roi, batch, x.shape), dict(reduction_function="sum"), ValueError,
         "ReductionFunction is not supported"),
        ((x, dy, roi, batch, x.shape), dict(interpolation_mode="cubic"), ValueError,
         "InterpolationMode is not supported"),
        ((x, dy, roi, batch, x.shape), dict(minimum_samples_per_output=3,
                                            maximum_samples_per_output=2), ValueError,
         "MinimumSamplesPerOutput must not exceed MaximumSamplesPerOutput"),
        ((x, dy, roi, batch, x.shape), dict(minimum_samples_per_output=0), ValueError,
         "MinimumSamplesPerOutput is out of range"),
        ((x, dy, roi, batch, x.shape), dict(minimum_samples_per_output=2**23 + 1), ValueError,
         "MinimumSamplesPerOutput times the output's height and width"),
        ((x, dy, roi, batch, x.shape), dict(spatial_scale_x=math.inf), ValueError,
         "SpatialScaleX must be finite"),
        ((x, dy, roi, batch, x.shape), dict(align_regions_to_corners=1), TypeError,
         "AlignRegionsToCorners must be a bool"),
        ((x, dy, roi[:, :3], batch, x.shape), {}, ValueError, "ROITensor.Sizes must have"),
        ((x, dy, roi[:2], batch[:2], x.shape), {}, ValueError,
         r"InputGradientTensor.Sizes\[0\] must equal the number of regions"),
        ((x, dy, roi, batch[:2], x.shape), {}, ValueError,
         "BatchIndicesTensor.Sizes must hold one index per region"),
        ((x, dy, roi, batch.astype(np.int32), x.shape), {}, TypeError,
         "BatchIndicesTensor has unsupported dtype: expected uint32"),
        ((x, dy, roi.astype(np.float16), batch, x.shape), {}, TypeError,
         "ROITensor.DataType must equal InputGradientTensor.DataType"),
        ((x, dy, roi, batch, (1, 3, 4, 4)), {}, ValueError,
         r"InputGradientTensor.Sizes\[1\] must equal OutputGradientTensor.Sizes\[1\]"),
        ((x, dy, roi, batch, (1, 2, 4, 5)), {}, ValueError,
         "InputTensor.Sizes must equal OutputGradientTensor.Sizes"),
        ((x, dy, roi, batch, (1, 2, 4)), {}, ValueError, "OutputGradientTensor.Sizes must be 4"),
    ]
    for args, kw, kind, message in cases:
        with pytest.raises(kind, match=f"^ROI_ALIGN_GRAD: .*{message}"):
            call(*args, **kw)
    for args, kw, kind, message in [
            ((None, dy, roi, batch, x.shape), dict(roi_gradient=True), TypeError,
             "InputTensor is required with OutputROIGradientTensor"),
            ((x, dy, roi, batch, x.shape), dict(roi_gradient=1), TypeError,
             "roi_gradient must be a bool")]:
        with pytest.raises(kind, match=f"^ROI_ALIGN_GRAD: .*{message}"):
            call(*args, **kw)
    desc = roi_align_describe(operators.Case((x, dy, roi, batch, x.shape), {}))
    for changes, kind, message in [
            (dict(output_roi_gradient_tensor=TensorDesc(DataType.FLOAT32, (1, 3, 4))), ValueError,
             "OutputROIGradientTensor.Sizes must equal ROITensor.Sizes"),
            (dict(output_roi_gradient_tensor=TensorDesc(DataType.FLOAT16, (3, 4))), TypeError,
             "OutputROIGradientTensor.DataType must equal InputGradientTensor.DataType"),
            (dict(output_gradient_tensor=None), TypeError,
             "OutputGradientTensor or OutputROIGradientTensor must be given"),
            (dict(input_tensor=None, output_roi_gradient_tensor=TensorDesc(DataType.FLOAT32,
                                                                           (3, 4))),
             TypeError, "InputTensor is required with OutputROIGradientTensor")]:
        with pytest.raises(kind, match=f"^ROI_ALIGN_GRAD: .*{message}"):
            dataclasses.replace(desc, **changes)
    # dROI alone (no dX): X gives the image's sizes.
    alone = dataclasses.replace(desc, output_gradient_tensor=None,
                                output_roi_gradient_tensor=TensorDesc(DataType.FLOAT32, (3, 4)))
    assert [name for name, _ in alone.tensor_fields()][-1] == "output_roi_gradient_tensor"
    assert isinstance(desc, RoiAlignGradDesc)
