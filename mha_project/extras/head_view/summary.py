"""Head-view summaries: per probe and epoch, its attention as a ``uint8`` tensor ``(layers, heads, n, n)``
(``round(sqrt(w) * 255)``, as the head view stores weights) and its caption (the prediction) as a string.

Size: one byte per weight, ``layers x heads x n^2`` per probe and epoch (n <= data.seq_len): the default run
(1 layer, 4 heads, 3 probes of up to 128 tokens) logs at most 192 KiB an epoch; 3 probes of 512 tokens
through 4 heads and 2 layers, 6 MiB an epoch."""

from __future__ import annotations

import json

import numpy as np
import tensorflow as tf
from tensorboard.compat.proto import summary_pb2

from mha_project.extras.head_view.assets import PLUGIN_NAME
from mha_project.extras.head_view.weights import quantize

# A probe's two tags per logged step: head_view/probe_{k}/weights/{step} and head_view/probe_{k}/caption/{step}.
# One tag per step, so the Attention tab reads the one step it shows, however many epochs a run logged.
WEIGHTS, CAPTION = "weights", "caption"


def _metadata(content: dict) -> tf.compat.v1.SummaryMetadata:
    metadata = tf.compat.v1.SummaryMetadata()
    metadata.plugin_data.plugin_name = PLUGIN_NAME
    metadata.plugin_data.content = json.dumps(content, ensure_ascii=False).encode("utf-8")
    metadata.data_class = summary_pb2.DATA_CLASS_TENSOR  # what the data provider's list_tensors returns
    return metadata


def write_head_view_summary(
    k: int, text: str, tokens: list[str], layers: list[np.ndarray], caption: str, label: str, step
):
    """Probe ``k``'s attention at ``step`` into the default summary writer. ``layers``: one ``(heads, n, n)``
    array per layer for this text; ``label``: how the run is listed (its swept values, e.g. ``heads=8``)."""
    n = len(tokens)
    weights = np.stack([quantize(np.asarray(s)[:, :n, :n]) for s in layers])
    described = {"text": text, "tokens": list(tokens), "label": label}
    at = int(step)
    tf.summary.write(
        f"head_view/probe_{k}/{WEIGHTS}/{at}", tf.constant(weights), step=at, metadata=_metadata(described)
    )
    tf.summary.write(f"head_view/probe_{k}/{CAPTION}/{at}", tf.constant(caption), step=at, metadata=_metadata({}))
