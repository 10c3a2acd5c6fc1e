"""pyvkgrad: DirectML's backpropagation operators on every Vulkan GPU, through Kompute.

Describe an operator with DirectML's fields, compile it once for a device, bind device
tensors, record and execute; or call the one-call function with numpy arrays.
"""

from .tensor import DataType, TensorDesc
from .ops.activation_relu_grad import ActivationReluGradDesc, activation_relu_grad
from .ops.resample_grad import AxisDirection, InterpolationMode, ResampleGradDesc, resample_grad
from .ops.batch_normalization_grad import BatchNormalizationGradDesc, batch_normalization_grad
from .ops.batch_normalization_training_grad import (BatchNormalizationTrainingGradDesc,
                                                    batch_normalization_training_grad)


def devices():
    """Every Vulkan device, in the loader's order (imports kp on first use)."""
    from .device import devices as _devices
    return _devices()


def default_device():
    """The device one-call functions use: PYVKGRAD_DEVICE, else the first GPU, else lavapipe."""
    from .device import default_device as _default
    return _default()


__all__ = ["DataType", "TensorDesc",
           "ActivationReluGradDesc", "activation_relu_grad",
           "ResampleGradDesc", "resample_grad", "InterpolationMode", "AxisDirection",
           "BatchNormalizationGradDesc", "batch_normalization_grad",
           "BatchNormalizationTrainingGradDesc", "batch_normalization_training_grad",
           "devices", "default_device"]
__version__ = "0.1.0"
