"""mha-project: a small Transformer encoder classifier built on keras.layers.MultiHeadAttention.

Importing this package is cheap (no TensorFlow, no Keras) and changes nothing outside it, so a bad command
line is answered in about a second. To load a saved model with Keras directly, register the project's
Keras classes first (Keras finds custom classes only by their registered names):

    import keras, mha_project
    mha_project.register_keras_objects()
    model = keras.saving.load_model("outputs/runs/<time>/model.keras", safe_mode=True)
"""

__version__ = "0.1.0"


def register_keras_objects() -> None:
    """Import every module that registers a Keras serializable, so ``load_model`` finds them by name."""
    import mha_project.training.saving  # noqa: F401  (it imports each of them)
