"""The model: layers (``layers.py``), the encoder backbone (``backbone.py``), the classifier on it
(``classifier.py``) and its poolings. Each class registers with Keras when its module is imported, under the
``mha_project`` package: after ``import mha_project.model``, ``keras.saving.load_model`` finds them by name."""

from mha_project.quiet import import_tensorflow_quietly

import_tensorflow_quietly()  # the API's first TensorFlow import (a notebook's): its C++ start-up lines hidden

from mha_project.model import backbone, classifier, layers, poolings  # noqa: F401  (they register)
