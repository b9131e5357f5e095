"""Loading a saved model: Keras's own loader in safe mode, with one-line answers for what it refuses."""

from __future__ import annotations

import keras

# Keras finds the project's classes only by their registered names: import every module that registers one.
import mha_project.model.backbone  # noqa: F401  (EncoderBackbone)
import mha_project.model.classifier  # noqa: F401  (TextClassifier)
import mha_project.model.layers  # noqa: F401  (TokenAndPositionEmbedding, EncoderBlock, ...)
import mha_project.model.poolings  # noqa: F401
import mha_project.training.schedules  # noqa: F401  (WarmupCosine, saved with each model's optimizer)
from mha_project.errors import UserError, message_line
from mha_project.extending import import_keras_modules


def load_model_safely(path):
    """``keras.saving.load_model`` with ``safe_mode=True``: code-carrying layers (Lambda) are refused."""
    import_keras_modules()  # the extras' Keras classes (mha_project/extending.py)
    try:
        return keras.saving.load_model(path, safe_mode=True)
    except ValueError as err:
        if "safe_mode" in str(err) or "Lambda" in str(err):
            raise UserError(
                f"refusing to load {path}: it contains a Lambda layer or other arbitrary code, "
                "which safe_mode=True does not deserialise; only models built by mha_project load"
            ) from None
        raise damaged(path, err) from None
    except Exception as err:  # a truncated or overwritten zip, HDF5 errors, ...: the file is damaged
        raise damaged(path, err) from None


def damaged(path, err) -> UserError:
    return UserError(
        f"{path} cannot be loaded ({type(err).__name__}: {message_line(err)[:160]}); the file is damaged: "
        "restore it, or train the run again with overwrite=true"
    )
