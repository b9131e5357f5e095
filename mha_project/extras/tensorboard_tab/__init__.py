"""TensorBoard's Attention tab: the interactive head view of every run that logged attention, per epoch.

The training callback writes each probe's tokens and one-byte attention weights as tensor summaries
owned by this plugin (``mha_project/attention/head_view_summary.py``); ``plugin.py`` reads them through
TensorBoard's data provider and serves the page, which is the head view's own script
(``mha_project/attention/head_view.js``) with this package's run list and epoch slider
(``tensorboard_tab.js``). Registered through the ``tensorboard_plugins`` entry point in pyproject.toml.
"""

from mha_project.attention import PLUGIN_NAME

__all__ = ["PLUGIN_NAME"]
