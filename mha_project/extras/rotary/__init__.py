"""``model.position_encoding=rotary``: no learned position table; each head's queries and keys are rotated by
their position inside attention (RoFormer), so attention scores depend on relative positions only. The encoder
blocks take their attention layer from ``POSITION_ENCODINGS`` (``mha_project/extending.py``);
docs/pretraining.md has the measurements."""

from __future__ import annotations

from mha_project.errors import ConfigError
from mha_project.extending import POSITION_ENCODINGS, config_check, keras_module


def rotary_attention(**arguments):
    """A ``keras.layers.MultiHeadAttention`` that rotates queries and keys by position (``EncoderBlock.build``)."""
    from mha_project.extras.rotary.attention import RotaryMultiHeadAttention

    return RotaryMultiHeadAttention(**arguments)


POSITION_ENCODINGS["rotary"] = rotary_attention


@config_check
def check_rotary(cfg) -> None:
    if cfg.model.position_encoding == "rotary" and cfg.model.key_dim % 2:
        raise ConfigError(
            f"key_dim={cfg.model.key_dim} is invalid with model.position_encoding=rotary: rotary positions rotate "
            "pairs of query/key features, so key_dim must be even"
        )


keras_module("mha_project.extras.rotary.attention")
