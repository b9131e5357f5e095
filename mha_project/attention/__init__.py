"""Attention made visible: the seed's formulas and a model's own scores (``scores.py``), pictures
(``plots.py``), TensorBoard records (``summaries.py``).

The probes' attention records belong to TensorBoard's ``attention`` plugin (the head_view extra's Attention tab
reads them): per probe and logged epoch, its weights as a ``uint8`` tensor ``(layers, heads, n, n)``
(:func:`quantize`) under ``attention_weights/probe_{k}/weights/{step}``, its text and tokens in the metadata, and
its caption under ``.../caption/{step}``. Importing this module is cheap (NumPy only): TensorBoard's process
reads it."""

import numpy as np

ATTENTION_PLUGIN = "attention"  # TensorBoard's plugin name of the probes' attention records
WEIGHTS, CAPTION = "weights", "caption"  # attention_weights/probe_{k}/{WEIGHTS or CAPTION}/{step}


def quantize(scores) -> np.ndarray:
    """Weights in [0, 1] -> uint8 ``round(sqrt(w) * 255)`` (small weights keep their precision): how attention is
    stored for the head view's pictures and pages. A NaN (the weights of a run that diverged) is stored as 0.

    >>> quantize([0.0, 0.25, 1.0, float("nan")]).tolist()
    [0, 128, 255, 0]
    """
    weights = np.nan_to_num(np.asarray(scores, "float64"), nan=0.0)
    return np.round(np.sqrt(np.clip(weights, 0.0, 1.0)) * 255).astype("uint8")
