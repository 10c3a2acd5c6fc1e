"""Placeholder: being implemented (see the issue). Replaced by the real operator."""


class ResampleGradDesc:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("ResampleGradDesc is not implemented yet")


def resample_grad(*args, **kwargs):
    raise NotImplementedError("resample_grad is not implemented yet")
