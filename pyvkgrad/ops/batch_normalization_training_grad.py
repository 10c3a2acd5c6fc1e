"""Placeholder: being implemented (see the issue). Replaced by the real operator."""


class BatchNormalizationTrainingGradDesc:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("BatchNormalizationTrainingGradDesc is not implemented yet")


def batch_normalization_training_grad(*args, **kwargs):
    raise NotImplementedError("batch_normalization_training_grad is not implemented yet")
