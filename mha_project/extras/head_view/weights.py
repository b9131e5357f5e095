"""How the head view stores attention: one byte a weight, and the smallest weight it draws. Cheap to import
(NumPy only): TensorBoard's process reads it without TensorFlow."""

import numpy as np

MIN_WEIGHT = 0.02  # lines for smaller weights are not drawn in the head view's all-queries view


def quantize(scores) -> np.ndarray:
    """Weights in [0, 1] -> uint8 ``round(sqrt(w) * 255)`` (small weights keep their precision): how attention is
    stored for the head view's pictures and pages. A NaN (the weights of a run that diverged) is stored as 0.

    >>> quantize([0.0, 0.25, 1.0, float("nan")]).tolist()
    [0, 128, 255, 0]
    """
    weights = np.nan_to_num(np.asarray(scores, "float64"), nan=0.0)
    return np.round(np.sqrt(np.clip(weights, 0.0, 1.0)) * 255).astype("uint8")
