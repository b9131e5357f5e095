"""``model/backbone=rotary``'s schema: the encoder's settings, with the one rotary positions add (an even
``key_dim``); no TensorFlow."""

from dataclasses import dataclass

from mha_project.config import BackboneConfig, store
from mha_project.errors import ConfigError


@dataclass
class RotaryBackboneConfig(BackboneConfig):
    @staticmethod
    def check(backbone, cfg) -> None:
        if backbone.key_dim % 2:
            raise ConfigError(
                f"key_dim={backbone.key_dim} is invalid with model/backbone=rotary: rotary positions rotate "
                "pairs of query/key features, so key_dim must be even"
            )


store("rotary_schema", RotaryBackboneConfig, at="model.backbone")
