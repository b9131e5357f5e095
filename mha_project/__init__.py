"""mha-project: a small Transformer encoder classifier built on keras.layers.MultiHeadAttention.

Importing this package is cheap (no TensorFlow, no Keras), so a bad command line is answered in about a
second. The Keras classes register when their modules are imported (``mha_project.model`` and an extra's),
as keras-hub's do; the analysis tools' ``load_model`` imports the ones a run's config names, then loads the
model the Keras way (``keras.saving.load_model(..., safe_mode=True)``).
"""

__version__ = "0.1.0"
PACKAGE = "mha_project"  # the package every Keras class here registers under
