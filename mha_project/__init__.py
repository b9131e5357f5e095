"""mha-project: a small Transformer encoder classifier built on keras.layers.MultiHeadAttention.

Importing this package is cheap (no TensorFlow), so a bad command line is answered in about a second.
It installs two import hooks, both of which act only when TensorFlow / Keras are first imported:

* TensorFlow's start-up lines on a CPU machine (oneDNN notices, "Could not find cuda drivers",
  "failed call to cuInit") are kept out of the terminal. TensorFlow 2.21 writes them through absl
  before ``TF_CPP_MIN_LOG_LEVEL`` applies, so the only way to hide them is to point file descriptor 2
  at /dev/null while TensorFlow loads and looks for devices. ``TF_CPP_MIN_LOG_LEVEL=0`` shows them.
* When Keras is imported, :mod:`mha_project.model.layers` is imported too, so ``import mha_project`` is
  enough for ``keras.saving.load_model("model.keras", safe_mode=True)``: Keras finds custom classes
  only by their registered name and never imports a non-Keras module itself.

Both are import hooks rather than plain imports here because importing Keras costs seconds.
"""

import contextlib
import importlib.abc
import importlib.util
import os
import sys

__version__ = "0.1.0"

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def tensorflow_verbose() -> bool:
    return os.environ.get("TF_CPP_MIN_LOG_LEVEL") == "0"


@contextlib.contextmanager
def _stderr_fd_silenced():
    """Point fd 2 at /dev/null (C++ writes bypass sys.stderr); restore it even on error."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real fd 2 (embedded interpreters): nothing to silence
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Wraps the loading of one top-level module: ``around`` is a context manager for its execution,
    ``after`` runs once it is complete. Removes itself after the first use."""

    def __init__(self, name, around=contextlib.nullcontext, after=None):
        self.name, self.around, self.after = name, around, after

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_follow(module):
            with self.around():
                exec_module(module)
                if self.after is not None:
                    self.after(module)

        spec.loader.exec_module = exec_and_follow
        return spec


def _look_for_devices(tensorflow):
    # Device discovery (and its cuInit line) happens here, inside the silenced block, not at the first op.
    tensorflow.config.list_physical_devices()


def register_keras_objects() -> None:
    """Import every module that registers a Keras serializable, so ``load_model`` finds them by name."""
    import mha_project.model.backbone  # noqa: F401  (EncoderBackbone)
    import mha_project.model.classifier  # noqa: F401  (TextClassifier)
    import mha_project.model.heads  # noqa: F401  (the poolings, MaskedLMHead)
    import mha_project.model.layers  # noqa: F401  (TokenAndPositionEmbedding, EncoderBlock, ...)
    import mha_project.model.pretraining  # noqa: F401  (MaskedLanguageModel, ReplacedTokenDetector)
    import mha_project.training.schedules  # noqa: F401  (WarmupCosine, saved with each model's optimizer)


def _register_layers(_keras):
    try:
        register_keras_objects()
    except ImportError:
        # Keras was imported from inside one of those modules' own imports (TensorFlow loads Keras): they
        # are half-initialised now; the code that loads a model calls register_keras_objects() itself.
        pass


def _install_hooks():
    hooks = []
    if "tensorflow" not in sys.modules and not tensorflow_verbose():
        hooks.append(_AfterImport("tensorflow", around=_stderr_fd_silenced, after=_look_for_devices))
    if "keras" in sys.modules:
        _register_layers(sys.modules["keras"])
    else:
        hooks.append(_AfterImport("keras", after=_register_layers))
    sys.meta_path[:0] = hooks


_install_hooks()
