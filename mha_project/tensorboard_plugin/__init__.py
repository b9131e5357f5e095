"""TensorBoard's Attention tab: the interactive head view of every run that logged attention, per epoch.

The training callback writes each probe's tokens and one-byte attention weights as tensor summaries
owned by this plugin (``summary.py``); ``plugin.py`` reads them through TensorBoard's data provider and
serves the page, which is the head view's own script (``mha_project/analysis/head_view.js``) with a run
list and an epoch slider. Registered through the ``tensorboard_plugins`` entry point in pyproject.toml.

Importing this package is cheap (no TensorFlow): ``PLUGIN_NAME`` is what both halves agree on.
"""

PLUGIN_NAME = "mha_attention"
