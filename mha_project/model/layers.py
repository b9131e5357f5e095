"""The Transformer encoder's building blocks, written the keras-hub way.

Each layer has an explicit ``build``, a ``get_config`` that round-trips through
``model.save``/``keras.saving.load_model``, and is registered under the ``mha_project`` package."""

from __future__ import annotations

import keras
from keras import layers, ops

from mha_project import PACKAGE
from mha_project.config import EMBEDDING_NORMS


@keras.saving.register_keras_serializable(package=PACKAGE)
class TokenAndPositionEmbedding(layers.Layer):
    """Token embedding plus a learned position embedding; emits the padding mask.

    Token id 0 is padding: ``compute_mask`` returns ``token_ids != 0``, and Keras hands that mask to
    every following layer, so each ``MultiHeadAttention`` gives padding zero attention.

    Args:
        vocab_size: number of token ids (0 = padding, 1 = out-of-vocabulary).
        max_len: the longest sequence the position table covers; shorter inputs are fine.
        embed_dim: width of the embeddings (the model's ``d_model``).
        cls_token: prepend a learned ``[CLS]`` vector (position 0) that the classifier reads; the
            output is then one position longer than the input.
        learned_positions: add the learned position table (the default); ``False`` when attention itself
            encodes positions (an ``EncoderBlock`` whose ``attention_class`` rotates queries and keys) and the
            embedding is the token's alone.
        embedding_norm: how the summed token + position embeddings are scaled before the first
            attention layer. ``"layer_norm"`` (BERT, keras-hub's BERT backbone): a LayerNormalization,
            so queries and keys start at unit scale and the first attention's logits can move;
            ``"sqrt_dim"`` (the original Transformer): multiply the token embedding by sqrt(embed_dim);
            ``"none"``: raw embeddings (Keras's initialiser gives +-0.05, so the first attention layer
            starts uniform: docs/results.md, "Why heads stay uniform").

    Example:
    >>> emb = TokenAndPositionEmbedding(vocab_size=100, max_len=16, embed_dim=8)
    >>> emb(ops.convert_to_tensor([[5, 7, 0, 0]])).shape
    TensorShape([1, 4, 8])
    """

    def __init__(
        self,
        vocab_size: int,
        max_len: int,
        embed_dim: int,
        cls_token: bool = False,
        embedding_norm: str = "layer_norm",
        layer_norm_epsilon: float = 1e-6,
        learned_positions: bool = True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if embedding_norm not in EMBEDDING_NORMS:
            raise ValueError(
                f"embedding_norm={embedding_norm!r} is invalid: must be one of {', '.join(EMBEDDING_NORMS)}"
            )
        self.vocab_size = vocab_size
        self.max_len = max_len
        self.embed_dim = embed_dim
        self.cls_token = cls_token
        self.embedding_norm = embedding_norm
        self.layer_norm_epsilon = layer_norm_epsilon
        self.learned_positions = learned_positions
        self.token_embedding = layers.Embedding(vocab_size, embed_dim, name="token_embedding", dtype=self.dtype_policy)
        self.position_embedding = None
        if learned_positions:
            self.position_embedding = layers.Embedding(
                max_len + int(cls_token), embed_dim, name="position_embedding", dtype=self.dtype_policy
            )
        self.norm = None
        if embedding_norm == "layer_norm":
            self.norm = layers.LayerNormalization(
                epsilon=layer_norm_epsilon, name="embedding_norm", dtype=self.dtype_policy
            )
        self.supports_masking = True

    def build(self, input_shape):
        self.token_embedding.build(input_shape)
        if self.position_embedding is not None:
            self.position_embedding.build((None,))
        if self.cls_token:
            self.cls_embedding = self.add_weight(
                shape=(self.embed_dim,), initializer="random_normal", name="cls_embedding"
            )
        if self.norm is not None:
            self.norm.build((None, None, self.embed_dim))
        self.built = True

    def call(self, token_ids):
        x = self.token_embedding(token_ids)
        if self.embedding_norm == "sqrt_dim":
            x = x * ops.cast(ops.sqrt(float(self.embed_dim)), x.dtype)
        if self.cls_token:
            cls = ops.broadcast_to(ops.cast(self.cls_embedding, x.dtype), (ops.shape(x)[0], 1, self.embed_dim))
            x = ops.concatenate([cls, x], axis=1)
        if self.position_embedding is not None:
            # Inputs may be shorter than max_len (dynamic padding); never longer.
            positions = ops.arange(ops.shape(x)[1])
            x = x + ops.cast(self.position_embedding(positions), x.dtype)[None, :, :]
        if self.norm is not None:
            x = self.norm(x)
        return x

    def compute_mask(self, token_ids, mask=None):
        real = ops.not_equal(token_ids, 0)
        if self.cls_token:
            real = ops.concatenate([ops.ones_like(real[:, :1]), real], axis=1)
        return real

    def compute_output_shape(self, input_shape):
        length = None if input_shape[1] is None or not self.cls_token else input_shape[1] + 1
        return (input_shape[0], length if self.cls_token else input_shape[1], self.embed_dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size,
            max_len=self.max_len,
            embed_dim=self.embed_dim,
            cls_token=self.cls_token,
            embedding_norm=self.embedding_norm,
            layer_norm_epsilon=self.layer_norm_epsilon,
            learned_positions=self.learned_positions,
        )
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class LocalConvolution(layers.Layer):
    """Each token's vector mixed with its neighbours' before attention (``model.backbone.local_conv``)::

        x = LayerNorm(x + Dropout(Conv1D(embed_dim, width, gelu, padding="same")(x * padding_mask)))

    n-gram features inside the encoder, as ConvBERT (Jiang et al. 2020) puts convolutions beside its
    attention heads; this is its simplest form, one plain convolution in front of the first block.
    Padding enters the convolution as zeros (as the text's edges do), and the mask passes through.

    Args:
        width: the kernel's width in tokens (3: each token sees one neighbour on either side).
        dropout: rate on the convolution's output.

    Example:
    >>> conv = LocalConvolution(width=3)
    >>> tuple(conv(keras.random.normal((2, 10, 8))).shape)
    (2, 10, 8)
    """

    def __init__(self, width: int = 3, dropout: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        self.width = width
        self.dropout = dropout
        self.supports_masking = True

    def build(self, input_shape):
        embed_dim = input_shape[-1]
        self.conv = layers.Conv1D(
            embed_dim, self.width, padding="same", activation="gelu", name="conv", dtype=self.dtype_policy
        )
        self.conv.build(input_shape)
        self.conv_dropout = layers.Dropout(self.dropout, name="conv_dropout", dtype=self.dtype_policy)
        self.norm = layers.LayerNormalization(epsilon=1e-6, name="conv_norm", dtype=self.dtype_policy)
        self.norm.build(input_shape)
        self.built = True

    def call(self, inputs, mask=None, training=None):
        x = inputs if mask is None else inputs * ops.cast(mask, inputs.dtype)[:, :, None]
        return self.norm(inputs + self.conv_dropout(self.conv(x), training=training))

    def compute_mask(self, inputs, mask=None):
        return mask

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "width": self.width, "dropout": self.dropout}


@keras.saving.register_keras_serializable(package=PACKAGE)
class EncoderBlock(layers.Layer):
    """One Transformer encoder block around ``keras.layers.MultiHeadAttention``.

    Post-norm (the original Transformer) by default::

        x = LayerNorm(x + Dropout(MHA(x, x, x, attention_mask=padding)))
        x = LayerNorm(x + Dropout(Dense(embed_dim)(Dense(ff_dim, activation)(x))))

    With ``norm_first=True`` (pre-norm) the LayerNorms move in front of each sub-layer.

    Args:
        num_heads: attention heads; each attends independently over its own projection.
        key_dim: size of each head's query/key projection (``d_k``; scores are scaled by 1/sqrt(d_k)).
        value_dim: size of each head's value projection; ``None`` means ``key_dim``.
        ff_dim: hidden width of the feed-forward network.
        dropout: rate used on both residual branches (and on the attention probabilities unless
            ``attention_dropout`` is given).
        attention_dropout: rate on the attention probabilities; ``None`` means ``dropout``.
        activation: feed-forward activation.
        use_bias: whether the Q/K/V/output projections have biases.
        use_gate: gate each head's output with a sigmoid of a projection of the query (Keras's gated attention).
        sliding_window: each token attends only to tokens fewer than this many positions away; ``None``: all.
        norm_first: pre-norm instead of post-norm.
        causal: each token attends only to itself and the tokens before it (a decoder's mask).
        layer_norm_epsilon: epsilon of both LayerNormalizations.

    ``attention_class`` is the layer each block builds: ``keras.layers.MultiHeadAttention``; a subclass may
    name another with the same arguments (the rotary extra's rotates queries and keys by position).

    Call args:
        inputs: ``(batch, seq, embed_dim)``.
        mask: ``(batch, seq)`` boolean padding mask (passed automatically by Keras).
        return_attention_scores: also return the ``(batch, heads, seq, seq)`` attention scores.

    Example:
    >>> block = EncoderBlock(num_heads=4, key_dim=16, ff_dim=64)
    >>> out, scores = block(keras.random.normal((2, 10, 32)), return_attention_scores=True)
    >>> tuple(out.shape), tuple(scores.shape)
    ((2, 10, 32), (2, 4, 10, 10))
    """

    attention_class = layers.MultiHeadAttention

    def __init__(
        self,
        num_heads: int,
        key_dim: int,
        ff_dim: int,
        value_dim: int | None = None,
        dropout: float = 0.0,
        activation: str = "gelu",
        use_bias: bool = True,
        use_gate: bool = False,
        sliding_window: int | None = None,
        norm_first: bool = False,
        layer_norm_epsilon: float = 1e-6,
        attention_dropout: float | None = None,
        causal: bool = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.causal = causal
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim
        self.ff_dim = ff_dim
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.activation = activation
        self.use_bias = use_bias
        self.use_gate = use_gate
        self.sliding_window = sliding_window
        self.norm_first = norm_first
        self.layer_norm_epsilon = layer_norm_epsilon
        self.supports_masking = True

    def build(self, input_shape):
        embed_dim = input_shape[-1]
        self.attention = self.attention_class(
            num_heads=self.num_heads,
            key_dim=self.key_dim,
            value_dim=self.value_dim,
            dropout=self.dropout if self.attention_dropout is None else self.attention_dropout,
            use_bias=self.use_bias,
            use_gate=self.use_gate,
            sliding_window=self.sliding_window,
            name="attention",
            dtype=self.dtype_policy,
        )
        self.attention.build(input_shape, input_shape)
        self.attention_output_dropout = layers.Dropout(
            self.dropout, name="attention_output_dropout", dtype=self.dtype_policy
        )
        self.attention_norm = layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, name="attention_norm", dtype=self.dtype_policy
        )
        self.attention_norm.build(input_shape)
        self.ff_inner = layers.Dense(self.ff_dim, activation=self.activation, name="ff_inner", dtype=self.dtype_policy)
        self.ff_inner.build(input_shape)
        self.ff_outer = layers.Dense(embed_dim, name="ff_outer", dtype=self.dtype_policy)
        self.ff_outer.build(tuple(input_shape[:-1]) + (self.ff_dim,))
        self.ff_dropout = layers.Dropout(self.dropout, name="ff_dropout", dtype=self.dtype_policy)
        self.ff_norm = layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, name="ff_norm", dtype=self.dtype_policy
        )
        self.ff_norm.build(input_shape)
        self.built = True

    def call(self, inputs, mask=None, training=None, return_attention_scores=False):
        attention_mask = None
        if mask is not None:
            # (batch, 1, seq): every query row may attend to real tokens only. Padding *query* rows
            # are masked by MultiHeadAttention itself from the mask Keras attaches to `inputs`.
            attention_mask = ops.cast(mask, "bool")[:, None, :]

        x = inputs
        residual = x
        if self.norm_first:
            x = self.attention_norm(x)
        # Scores only when asked (logging, inspection): without them Keras may take its fused
        # ops.dot_product_attention path (when attention dropout is 0), which never forms the score matrix.
        attended = self.attention(
            x,
            x,
            x,
            attention_mask=attention_mask,
            training=training,
            return_attention_scores=return_attention_scores,
            use_causal_mask=self.causal,
        )
        x, scores = attended if return_attention_scores else (attended, None)
        x = residual + self.attention_output_dropout(x, training=training)
        if not self.norm_first:
            x = self.attention_norm(x)

        residual = x
        if self.norm_first:
            x = self.ff_norm(x)
        x = self.ff_outer(self.ff_inner(x))
        x = residual + self.ff_dropout(x, training=training)
        if not self.norm_first:
            x = self.ff_norm(x)

        if return_attention_scores:
            return x, scores
        return x

    def compute_mask(self, inputs, mask=None):
        return mask

    def compute_output_shape(self, input_shape):
        return input_shape

    def compute_output_spec(self, inputs, mask=None, training=None, return_attention_scores=False):
        # Symbolic calls (the functional API) return what eager calls return: the scores too when asked.
        output = keras.KerasTensor(inputs.shape, dtype=self.compute_dtype)
        if not return_attention_scores:
            return output
        batch, length = inputs.shape[0], inputs.shape[1]
        return output, keras.KerasTensor((batch, self.num_heads, length, length), dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            key_dim=self.key_dim,
            value_dim=self.value_dim,
            ff_dim=self.ff_dim,
            dropout=self.dropout,
            activation=self.activation,
            use_bias=self.use_bias,
            use_gate=self.use_gate,
            sliding_window=self.sliding_window,
            norm_first=self.norm_first,
            layer_norm_epsilon=self.layer_norm_epsilon,
            attention_dropout=self.attention_dropout,
            causal=self.causal,
        )
        return config

    def summary_line(self) -> str:
        """What Keras's layer table does not show: the attention's shape."""
        return (
            f"{type(self.attention).__name__}(num_heads={self.num_heads}, key_dim={self.key_dim}, "
            f"value_dim={self.value_dim or self.key_dim}) on embed_dim {self.ff_outer.units}, "
            f"feed-forward {self.ff_dim}"
        )
