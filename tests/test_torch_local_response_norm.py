"""pyvkgrad.torch.local_response_norm and LocalResponseNorm: the forward is PyTorch's, the
backward LOCAL_RESPONSE_NORMALIZATION_GRAD on the device, against PyTorch's own backward
for odd and even sizes (even ones run on the reversed channels), 3-D to 5-D inputs, float16,
channels-last inputs, and `convert`."""

import numpy as np
import pytest

from torch_support import assert_close, laid_out, layouts, same_layout, torch

import pyvkgrad.torch as vt
from pyvkgrad import reference

nn = torch.nn


def magnitude(x, dy, size, alpha, beta, k):
    """The sizes of dX's two terms (the operator's tolerance), on the input folded to 4-D
    and, for an even size, on the reversed channels (where DirectML's window is PyTorch's)."""
    folded = (x.shape[0], x.shape[1], -1, 1)
    flip = slice(None, None, -1) if size % 2 == 0 else slice(None)
    xs, dys = (np.abs(t.detach().double().numpy().reshape(folded))[:, flip] for t in (x, dy))
    first, second = reference.local_response_normalization_grad_terms(xs, dys, True, size, alpha,
                                                                      beta, k)
    return (np.abs(first) + np.abs(second))[:, flip].reshape(x.shape)


def grads(fn, x, dy):
    x = x.detach().clone().requires_grad_()
    y = fn(x)
    y.backward(dy)
    return y, x.grad


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize("shape", [(2, 7, 9), (2, 11, 4, 5), (1, 6, 2, 3, 4), (3, 1, 4)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_backward_as_pytorch(rng, size, shape, dtype):
    if dtype == torch.float16 and len(shape) > 3:
        pytest.skip("PyTorch's forward (avg_pool3d) takes no float16 on the CPU")
    alpha, beta, k = 2e-2, 0.75, 1.5
    x = torch.from_numpy(rng.standard_normal(shape)).to(dtype)
    dy = torch.from_numpy(rng.standard_normal(shape)).to(dtype)
    y1, g1 = grads(lambda t: nn.functional.local_response_norm(t.float(), size, alpha, beta, k),
                   x, dy.float())
    y2, g2 = grads(lambda t: vt.local_response_norm(t, size, alpha, beta, k), x, dy)
    assert torch.equal(y2, nn.functional.local_response_norm(x, size, alpha, beta, k))
    same_layout(g2, x)
    # PyTorch's float32 backward has errors of its own, of the same order as ours.
    assert_close(g2, g1.double().numpy(), magnitude(x, dy, size, alpha, beta, k), dtype,
                 f"local_response_norm size {size} {list(shape)}", extra=0.0)


@pytest.mark.parametrize("layout", layouts(4))
def test_module_and_convert(rng, layout):
    """LocalResponseNorm's forward is nn.LocalResponseNorm's; convert swaps it (not chained
    in Sequential: it runs on its own between chained modules)."""
    ref = nn.Sequential(nn.ReLU(), nn.LocalResponseNorm(4, 1e-2, 0.75, 2.0), nn.ReLU())
    model = vt.convert(ref)
    assert type(model[1]) is vt.LocalResponseNorm and repr(model[1]) == repr(ref[1])
    x = laid_out(torch.from_numpy(rng.standard_normal((2, 9, 5, 4)).astype(np.float32)), layout)
    dy = torch.from_numpy(rng.standard_normal((2, 9, 5, 4)).astype(np.float32))
    y1, g1 = grads(ref, x, dy)
    y2, g2 = grads(model, x, dy)
    assert torch.equal(y1, y2)
    same_layout(g2, x)
    mask = (x > 0).numpy()  # the ReLU before passes these
    assert_close(g2, g1.double().numpy(), magnitude(torch.relu(x), dy, 4, 1e-2, 0.75, 2.0) * mask
                 + np.abs(g1.double().numpy()) * 1e-6, torch.float32, "convert")


def test_without_grad_is_pytorch(rng):
    x = torch.from_numpy(rng.standard_normal((2, 5, 3)).astype(np.float32))
    assert torch.equal(vt.local_response_norm(x, 3), nn.functional.local_response_norm(x, 3))
    with pytest.raises(TypeError, match="local_response_norm: torch.float64 tensors"):
        vt.local_response_norm(x.double().requires_grad_(), 3)
