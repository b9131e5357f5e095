"""The model: layers (``layers.py``), the encoder backbone (``backbone.py``), the classifier on it
(``classifier.py``) and its poolings. Each class registers with Keras when its module is imported, under the
``mha_project`` package: after ``import mha_project.model``, ``keras.saving.load_model`` finds them by name."""

PACKAGE = "mha_project"  # the package every layer and model here is registered under with Keras

# isort: split
from mha_project.model import backbone, classifier, layers, poolings  # noqa: E402, F401  (they register)
