"""The n-gram extra's options, read by its schema (``__init__``) and its classifier (``classifier.py``); importing
this module is cheap (no Keras)."""

NGRAM_BRANCHES = ("none", "bigram", "bigram_alone")  # model.ngram_branch; bigram_alone: no encoder
# model.ngram_weighting: a mean embedding (BagOfNgrams) | NBSVM (NaiveBayesNgrams) | TF-IDF (TfidfNgrams)
NGRAM_WEIGHTINGS = ("none", "nb", "tfidf")
NGRAM_OBJECTIVES = ("softmax", "one_vs_rest")  # model.objective; WideAndDeepClassifier(objective=)
