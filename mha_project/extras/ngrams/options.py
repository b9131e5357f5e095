"""The n-gram extra's options, read by its schema (``__init__``) and its classifier (``classifier.py``); importing
this module is cheap (no Keras)."""

# model.objective; WideAndDeepClassifier(objective=); auto: softmax for two classes, one-vs-rest for more
NGRAM_OBJECTIVES = ("softmax", "one_vs_rest", "auto")
# model.ngram_branch.c=auto's grid, and benchmarks/anchors.py's for TF-IDF + LR and NB-LR (tuned against tuned):
# LogisticRegressionCV's Cs, log-spaced over the three decades where the bags' best C has been on every dataset.
C_GRID = (0.01, 0.0316, 0.1, 0.3162, 1.0, 3.1623, 10.0)
