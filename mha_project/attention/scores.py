"""Multi-head attention, made executable and visible.

1. :func:`reference_mha` is the seed's formulas in NumPy, fed with the weights of a built
   ``keras.layers.MultiHeadAttention``; it reproduces the layer's output and scores (tests: atol 1e-5).

       head_i  = softmax(Q_i K_i^T / sqrt(d_k)) V_i      Q_i = query W_i^Q, K_i = key W_i^K, V_i = value W_i^V
       output  = concat(head_1, ..., head_h) W^O

2. :func:`attention_scores` reads a trained model's scores from its own forward pass (the backbone's
   ``attention_model``: the scores nodes of its graph), shape ``(batch, heads, query_len, key_len)``."""

from __future__ import annotations

import numpy as np
from keras import ops

from mha_project.data.pipeline import pad_batch
from mha_project.model.backbone import backbone_of


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    x = x - x.max(axis=axis, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


def mha_weights(layer) -> dict[str, np.ndarray]:
    """The projection matrices of a built MultiHeadAttention layer, by role.

    Keras stores them per head: W^Q is (d_model, heads, d_k), W^O is (heads, d_v, d_model).
    """
    weights = {}
    for role, dense in (
        ("q", layer.query_dense),
        ("k", layer.key_dense),
        ("v", layer.value_dense),
        ("o", layer.output_dense),
    ):
        weights[f"W{role}"] = np.asarray(dense.kernel.numpy(), dtype="float64")
        weights[f"b{role}"] = np.asarray(dense.bias.numpy(), dtype="float64") if dense.bias is not None else None
    return weights


def reference_mha(layer, query, value, key=None, attention_mask=None):
    """NumPy multi-head attention with the weights of ``layer``; returns ``(output, scores)``.

    Args:
        layer: a built ``keras.layers.MultiHeadAttention``.
        query: ``(batch, T, d_q)``; value: ``(batch, S, d_v_in)``; key defaults to value.
        attention_mask: ``(batch, T, S)`` booleans, True where a query may attend to a key.
    Returns:
        output ``(batch, T, d_out)`` and scores ``(batch, heads, T, S)``.
    """
    key = value if key is None else key
    w = mha_weights(layer)
    query, key, value = (np.asarray(a, dtype="float64") for a in (query, key, value))

    def project(x, kernel, bias):  # (b, n, d) x (d, heads, dim) -> (b, n, heads, dim)
        y = np.einsum("bnd,dhk->bnhk", x, kernel)
        return y if bias is None else y + bias

    q = project(query, w["Wq"], w["bq"])
    k = project(key, w["Wk"], w["bk"])
    v = project(value, w["Wv"], w["bv"])
    d_k = q.shape[-1]

    logits = np.einsum("bthk,bshk->bhts", q, k) / np.sqrt(d_k)  # Q K^T / sqrt(d_k), per head
    if attention_mask is not None:
        mask = np.asarray(attention_mask, dtype=bool)[:, None, :, :]  # same mask for every head
        logits = np.where(mask, logits, -1e9)
    scores = softmax(logits, axis=-1)
    if attention_mask is not None:
        scores = np.where(mask, scores, 0.0)  # a query with nothing to attend to attends to nothing

    heads = np.einsum("bhts,bshv->bthv", scores, v)  # scores . V, per head
    batch, t, h, d_v = heads.shape
    concat = heads.reshape(batch, t, h * d_v)  # concat(head_1..head_h)
    w_o = w["Wo"].reshape(h * d_v, -1)  # W^O as one matrix
    output = concat @ w_o
    if w["bo"] is not None:
        output = output + w["bo"]
    return output, scores


def attention_scores(model, token_ids: np.ndarray) -> list[np.ndarray]:
    """Per encoder layer, the scores ``(batch, heads, T, T)`` that ``model``'s forward pass computes on padded
    ``token_ids`` (inference mode). Rows of real tokens sum to 1; columns and rows of padding are 0."""
    backbone = backbone_of(model)
    ids = ops.convert_to_tensor(np.asarray(token_ids, dtype="int32"))
    by_layer = backbone.attention_model()(ids, training=False)
    scores = [by_layer[f"layer_{i}"] for i in range(len(by_layer))]
    real = np.asarray(ops.convert_to_numpy(backbone.embedding.compute_mask(ids)), dtype=bool)
    # Padding query rows exactly 0 whatever mask path Keras took.
    return [np.asarray(ops.convert_to_numpy(ops.cast(s, "float32"))) * real[:, None, :, None] for s in scores]


def has_cls_token(model) -> bool:
    return bool(backbone_of(model).embedding.cls_token)


def scores_for_texts(model, preprocessor, texts):
    """Tokenise ``texts`` like training did (``preprocessor``: the run's vocabulary, seq_len and truncation).

    Returns (scores per layer, tokens per text, real-position mask): with a ``[CLS]`` model, position 0
    of scores, tokens and mask is ``[CLS]``.
    """
    vocab = preprocessor.vectorizer.get_vocabulary()
    rows = preprocessor.encode(texts)
    ids = pad_batch(rows)
    cls = has_cls_token(model)
    tokens = [(["[CLS]"] if cls else []) + [vocab[i] for i in row] for row in rows]
    real = ids != 0
    if cls:
        real = np.concatenate([np.ones((len(rows), 1), bool), real], axis=1)
    return attention_scores(model, ids), tokens, real


def attention_entropy(scores: np.ndarray, real_rows: np.ndarray) -> np.ndarray:
    """Mean entropy (nats) of each head's attention rows over real query tokens: shape (heads,).

    Low entropy: the head focuses on a few tokens; log(n) would be uniform attention.
    """
    p = np.clip(scores, 1e-12, 1.0)
    row_entropy = -(scores * np.log(p)).sum(axis=-1)  # (batch, heads, T)
    weights = real_rows[:, None, :].astype("float64")  # (batch, 1, T)
    return (row_entropy * weights).sum(axis=(0, 2)) / np.maximum(weights.sum(axis=(0, 2)), 1.0)


def normalized_entropy_rows(scores: np.ndarray, real: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per query row: entropy / log(n). Returns (values (batch, heads, T), valid (batch, 1, T))."""
    scores = np.asarray(scores, dtype="float64")
    real = np.asarray(real, dtype=bool)
    n = real.sum(axis=1).astype("float64")  # (batch,)
    p = np.clip(scores, 1e-12, 1.0)
    entropy = -(scores * np.log(p)).sum(axis=-1)  # (batch, heads, T)
    log_n = np.log(np.maximum(n, 2.0))[:, None, None]
    valid = (real & (n[:, None] > 1))[:, None, :]
    return entropy / log_n, valid


def normalized_entropy(scores: np.ndarray, real: np.ndarray) -> np.ndarray:
    """Mean normalised entropy of each head over the real query rows: shape (heads,); 1.0 = uniform."""
    values, valid = normalized_entropy_rows(scores, real)
    return masked_mean(values, np.broadcast_to(valid, values.shape))


def masked_mean(values: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Mean over every axis but the heads axis (axis 1), counting only valid entries."""
    valid = valid.astype("float64")
    axes = tuple(a for a in range(values.ndim) if a != 1)
    total = valid.sum(axis=axes)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, (np.where(valid > 0, values, 0.0)).sum(axis=axes) / np.maximum(total, 1), np.nan)
