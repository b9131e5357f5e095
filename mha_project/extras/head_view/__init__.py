"""The interactive head view: one self-contained HTML page of a model's attention (``page.py`` with
``head_view.html``, ``.js`` and ``.css``), written as the run's ``attention.html`` (``callback.py``, a Hydra
callback; ``head_view.html=false``: none), by ``inspect_attention.py --html`` and inline in a notebook
(``notebook.py``: ``show``, ``compare``); ``inspect_attention.py --view lines`` (``lines.py``); and TensorBoard's
Attention tab, the same script over every run's logged probes, epoch by epoch: the core's ``attention`` records
read back by the plugin (``plugin.py``, with ``tensorboard_tab.js``), registered through the
``tensorboard_plugins`` entry point in pyproject.toml."""
