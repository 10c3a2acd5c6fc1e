"""pyvkgrad.torch.optim: optimizers whose step runs on the Vulkan device.

`Adam` is a drop-in for `torch.optim.Adam(params, lr, betas, eps)` whose step is DirectML's
ADAM_OPTIMIZER (docs/semantics.md §11): the moments live on the device between steps, and each
step uploads the parameter and its gradient, updates all three in place and reads the
parameter back.

One difference from PyTorch's Adam, by design: DirectML adds epsilon to sqrt(v') before the bias
correction (x' = x - lr alpha m' / (sqrt(v') + eps), alpha = sqrt(1 - beta2^t) / (1 - beta1^t)),
PyTorch after it (its eps is eps sqrt(1 - beta2^t) here). With the usual eps = 1e-8 the steps
differ by about eps / sqrt(v') of themselves, which matters only where gradients vanish. Over
100 steps of examples/train_digits.py (tests/test_torch_optim.py) the losses stay within 1e-3
of PyTorch's (4.8e-4 measured), the test accuracy is the same, and the parameters with real
gradients within 2e-3 (1.1e-3); two biases that feed a BatchNorm, whose gradients are rounding
noise, move by up to 0.03 differently.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, Optional, Tuple

import numpy as np
import torch

from ..ops.adam_optimizer import AdamOptimizerDesc
from . import _runtime

_FIELDS = ("input_parameters_tensor", "input_first_moment_tensor",
           "input_second_moment_tensor", "gradient_tensor", "training_step_tensor")


class Adam(torch.optim.Optimizer):
    """Adam with PyTorch's arguments (no weight decay, amsgrad, maximize or foreach), its step
    on the bridge's device (`pyvkgrad.torch.set_device`). Parameters float32 or float16, on the
    CPU."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-3,
                 betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        if not 0.0 <= lr:
            raise ValueError(f"Adam: invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Adam: invalid epsilon value: {eps}")
        for i, beta in enumerate(betas):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"Adam: invalid beta parameter at index {i}: {beta}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps))

    def _device_state(self, p: torch.Tensor, group: Dict[str, Any]) -> Dict[str, Any]:
        """The parameter's device tensors (x, m, v, g, T) and its compiled operator, made on its
        first step (moments zero) or when the hyperparameters changed."""
        state = self.state[p]
        key = (group["lr"], *group["betas"], group["eps"])
        if state.get("key") != key:
            device = _runtime.get_device()
            array = p.detach().numpy()
            if "tensors" not in state:
                zeros = np.zeros_like(array)
                state["tensors"] = [device.upload(a) for a in
                                    (array, zeros, zeros, zeros, np.zeros(1, np.uint32))]
                state["step"] = 0
            descs = [t.desc for t in state["tensors"]]
            state["operator"] = device.compile(AdamOptimizerDesc(
                *descs, *descs[:3], group["lr"], group["betas"][0], group["betas"][1],
                group["eps"]))
            state["key"] = key
        return state

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], float]] = None) -> Optional[float]:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("Adam does not support sparse gradients")
                state = self._device_state(p, group)
                state["step"] += 1
                x, m, v, g, t = state["tensors"]
                x.write(p.detach().numpy())
                g.write(p.grad.detach().numpy())
                t.write(np.array([state["step"]], np.uint32))
                bound = dict(zip(_FIELDS, (x, m, v, g, t)))
                state["operator"](**bound, output_parameters_tensor=x,
                                  output_first_moment_tensor=m, output_second_moment_tensor=v)
                p.copy_(torch.from_numpy(x.numpy()))
        return loss
