"""pyvkgrad: DirectML's backpropagation operators on every Vulkan GPU, through Kompute.

Describe an operator with DirectML's fields, compile it once for a device, bind device
tensors, record and execute; or call the one-call function with numpy arrays.
"""

from typing import TYPE_CHECKING, Any

def _require_runtime() -> None:
    """A pyvkgrad without its compiled runtime (a source checkout nobody built, or one that
    shadows an installed pyvkgrad because Python started in its root) is refused at import,
    saying what to do, rather than failing at the first device use or letting tests skip. A
    file-existence check: importing pyvkgrad loads no Vulkan runtime (descriptors and plans
    work without a Vulkan loader)."""
    import os
    from importlib.machinery import EXTENSION_SUFFIXES
    here = os.path.dirname(os.path.abspath(__file__))
    if any(os.path.isfile(os.path.join(here, "_kompute" + s)) for s in EXTENSION_SUFFIXES):
        return
    raise ImportError(
        f"pyvkgrad at {here} has no compiled runtime (pyvkgrad/_kompute{EXTENSION_SUFFIXES[0]}):"
        " it is a source checkout that was not built for this Python. In the checkout, run "
        "./tools/test or ./tools/demo, which build it; or install pyvkgrad (pip install "
        "pyvkgrad, or pip install <checkout>) and run Python outside the checkout's root, "
        "where the checkout's pyvkgrad/ would shadow the installed one")


_require_runtime()

from .tensor import DataType, TensorDesc
from .ops.activation_relu_grad import ActivationReluGradDesc, activation_relu_grad
from .ops.resample_grad import AxisDirection, InterpolationMode, ResampleGradDesc, resample_grad
from .ops.resample_grad1 import ResampleGrad1Desc, resample_grad1
from .ops.batch_normalization_grad import (BatchNormalizationGradDesc, BatchNormalizationGradResult,
                                          batch_normalization_grad)
from .ops.batch_normalization_training_grad import (BatchNormalizationTrainingGradDesc,
                                                    batch_normalization_training_grad)
from .ops.element_wise_clip_grad import ElementWiseClipGradDesc, element_wise_clip_grad
from .ops.element_wise_clip_grad1 import ElementWiseClipGrad1Desc, element_wise_clip_grad1
from .ops.random_generator import RandomGeneratorDesc, RandomGeneratorType, random_generator
from .ops.adam_optimizer import AdamOptimizerDesc, adam_optimizer
from .ops.batch_normalization_training import (BatchNormalizationTrainingDesc,
                                               BatchNormalizationTrainingResult,
                                               batch_normalization_training)
from .ops.average_pooling_grad import AveragePoolingGradDesc, average_pooling_grad
from .ops.max_pooling_grad import MaxPoolingGradDesc, max_pooling_grad
from .ops.roi_align_grad import ReduceFunction, RoiAlignGradDesc, roi_align_grad
from .ops.slice_grad import SliceGradDesc, slice_grad
from .ops.local_response_normalization_grad import (LocalResponseNormalizationGradDesc,
                                                    local_response_normalization_grad)

from .kernels import KernelError

# The device layer loads the Vulkan runtime; it is imported on first use, so that
# descriptors, plans and the oracle work without a Vulkan loader. Type checkers see the
# names through this import, which never runs.
if TYPE_CHECKING:
    from . import device, runtime
    from .device import (ClosedError, CompiledOperator, Device, DeviceError, DeviceTensor,
                         Recording, default_device, devices, get_device)

_DEVICE_NAMES = ("Device", "DeviceTensor", "CompiledOperator", "Recording", "DeviceError",
                 "ClosedError", "devices", "default_device", "get_device")


def __getattr__(name: str) -> Any:
    if name in _DEVICE_NAMES:
        from . import device
        value = getattr(device, name)
        globals()[name] = value  # resolved once: the next access is a plain lookup
        return value
    if name in ("device", "runtime"):  # submodules, imported on first use as well
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'pyvkgrad' has no attribute {name!r}")


__all__ = ["DataType", "TensorDesc",
           "ActivationReluGradDesc", "activation_relu_grad",
           "ResampleGradDesc", "resample_grad", "InterpolationMode", "AxisDirection",
           "ResampleGrad1Desc", "resample_grad1",
           "BatchNormalizationGradDesc", "batch_normalization_grad",
           "BatchNormalizationTrainingGradDesc", "batch_normalization_training_grad",
           "BatchNormalizationGradResult",
           "RandomGeneratorDesc", "random_generator", "RandomGeneratorType",
           "ElementWiseClipGradDesc", "element_wise_clip_grad",
           "ElementWiseClipGrad1Desc", "element_wise_clip_grad1",
           "AdamOptimizerDesc", "adam_optimizer",
           "BatchNormalizationTrainingDesc", "BatchNormalizationTrainingResult",
           "batch_normalization_training",
           "AveragePoolingGradDesc", "average_pooling_grad",
           "MaxPoolingGradDesc", "max_pooling_grad",
           "RoiAlignGradDesc", "roi_align_grad", "ReduceFunction",
           "SliceGradDesc", "slice_grad",
           "LocalResponseNormalizationGradDesc", "local_response_normalization_grad",
           "Device", "DeviceTensor", "CompiledOperator", "Recording",
           "DeviceError", "ClosedError", "KernelError",
           "devices", "default_device", "get_device"]
__version__ = "0.2.0"
