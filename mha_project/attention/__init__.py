"""What training records of attention and the tools and TensorBoard read back: scores from a built model
(``scores``, with the seed's formulas as a reference), the interactive head view (``head_view`` and its
page, script and style), the heatmaps (``plots``), and the TensorBoard summaries (``summaries``,
``head_view_summary``). Below ``training/``, ``analysis/`` and ``extras/tensorboard_tab/``, which all use it.

Importing this package is cheap (no TensorFlow).
"""

# The TensorBoard plugin that owns the head-view summaries (extras/tensorboard_tab serves them).
PLUGIN_NAME = "mha_attention"
