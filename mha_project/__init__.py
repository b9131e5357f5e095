"""mha-project: a small Transformer encoder classifier built on keras.layers.MultiHeadAttention.

Importing this package is cheap (no TensorFlow, no Keras), so a bad command line is answered in about a
second. Keras finds custom classes only by their registered names; the project registers its classes as soon
as Keras is imported (before or after this package), and those of every extra loaded so far (the entry points
load every extra present; README "What a run leaves behind" has the line), so a saved model loads the
Keras way: ``keras.saving.load_model("outputs/runs/<time>/model.keras", safe_mode=True)``.
"""

import importlib.abc
import importlib.util
import sys
import warnings

__version__ = "0.1.0"


def register_keras_objects() -> None:
    """Import every module that registers a Keras serializable, so ``load_model`` finds them by name: the
    core's, and those the extras imported so far listed (``mha_project/extending.py``)."""
    import mha_project.training.saving  # noqa: F401  (it imports each of the core's)
    from mha_project.extending import import_keras_modules

    import_keras_modules()


class _RegisterWhenKerasLoads(importlib.abc.MetaPathFinder):
    """Register the project's classes once Keras has loaded and no module of the project is half-imported: the
    modules that register classes import each other, so registering from inside one's import (whose first line
    may be ``import keras``) would find the others half-made. Python has no post-import hook but the import
    system's own finders; importing Keras here instead would load TensorFlow for every command."""

    busy = False  # asking the real finders, not this one again
    importing = 0  # the project's modules whose import is under way

    def find_spec(self, fullname, path=None, target=None):
        if self.busy or not (fullname == "keras" or fullname.startswith(__name__ + ".")):
            return None
        self.busy = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self.busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run_module = spec.loader.exec_module

        def exec_module(module):
            self.importing += fullname != "keras"
            try:
                run_module(module)
            finally:
                self.importing -= fullname != "keras"
            if self.importing == 0 and "keras" in sys.modules and self in sys.meta_path:
                sys.meta_path.remove(self)  # once is enough
                _register_quietly()

        spec.loader.exec_module = exec_module
        return spec


def _register_quietly() -> None:
    try:
        register_keras_objects()
    except Exception as err:  # noqa: BLE001 - Keras itself imported fine: say why loading would fail, later
        warnings.warn(f"mha_project could not register its Keras classes: {err}", stacklevel=2)


if "keras" in sys.modules:
    _register_quietly()
else:
    sys.meta_path.insert(0, _RegisterWhenKerasLoads())
