"""What training records of attention and the tools read back: scores from a built model (``scores``, with the
seed's formulas as a reference), the heatmaps (``plots``), and the TensorBoard summaries (``summaries``). Below
``training/`` and ``analysis/``, which use it."""
