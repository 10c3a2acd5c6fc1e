"""pyvkgrad.torch: train with PyTorch, backpropagate on any Vulkan GPU through pyvkgrad.

Autograd functions whose forward runs in PyTorch and whose backward runs DirectML's gradient
operators on a Vulkan device (`relu`, `threshold`, `hardtanh`, `relu6`, `batch_norm`,
`interpolate`, `avg_pool2d/3d`, `max_pool2d/3d`, `local_response_norm`, `roi_align`), drop-in
modules
(`ReLU`, `Hardtanh`, `ReLU6`, `BatchNorm1d/2d/3d`, `Upsample`, `AvgPool2d/3d`, `MaxPool2d/3d`,
`LocalResponseNorm`, and
`Sequential`, which chains their backward into one submission) and `convert(model)`, which swaps
them into an existing model; `optim.Adam`, a drop-in for `torch.optim.Adam` whose step runs
ADAM_OPTIMIZER on the device. docs/torch.md.

Needs PyTorch (`pip install 'pyvkgrad[torch]'`); the core package does not.
"""

try:
    import torch as _torch  # noqa: F401
except ImportError as _missing:  # pragma: no cover - exercised only without torch
    raise ImportError("pyvkgrad.torch needs PyTorch: pip install 'pyvkgrad[torch]' "
                      "(or a CPU build: pip install torch --index-url "
                      "https://download.pytorch.org/whl/cpu)") from _missing

from ._resample_map import InexactResample
from ._runtime import (cache_clear, cache_info, clear_programs, get_device, set_device,
                       set_options)
from . import optim
from .functional import (avg_pool2d, avg_pool3d, batch_norm, hardtanh, interpolate,
                         local_response_norm, max_pool2d, max_pool3d, relu, relu6, roi_align,
                         threshold)
from .modules import (AvgPool2d, AvgPool3d, BatchNorm1d, BatchNorm2d, BatchNorm3d, Hardtanh,
                      LocalResponseNorm, MaxPool2d, MaxPool3d, ReLU, ReLU6, Sequential, Upsample,
                      convert)

__all__ = ["relu", "threshold", "hardtanh", "relu6", "batch_norm", "interpolate",
           "ReLU", "Hardtanh", "ReLU6", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "Upsample",
           "Sequential", "avg_pool2d", "avg_pool3d", "max_pool2d", "max_pool3d", "AvgPool2d",
           "AvgPool3d", "MaxPool2d", "MaxPool3d", "local_response_norm", "LocalResponseNorm",
           "convert", "set_device", "get_device", "set_options", "cache_clear", "cache_info",
           "clear_programs", "InexactResample", "optim", "roi_align"]
