"""The model: layers, the encoder backbone, the tasks on it (classifier, masked LM, ELECTRA), and their options.

Importing this package is cheap (no Keras): ``mha_project.config`` reads the options below.
"""

PACKAGE = "mha_project"  # the package every layer and model here is registered under with Keras

INPUT_SCALES = ("layer_norm", "sqrt_dim", "none")  # TokenAndPositionEmbedding(input_scale=...)
POSITION_ENCODINGS = ("learned", "rotary")  # model.position_encoding (model/rotary.py, RotaryMultiHeadAttention)
OBJECTIVES = ("none", "mlm", "electra")  # pretrain.objective (model/pretraining.py)
NGRAM_BRANCHES = ("none", "bigram", "bigram_alone")  # model.ngram_branch (model/ngrams.py); bigram_alone: no encoder
NGRAM_WEIGHTINGS = ("none", "nb")  # model.ngram_weighting: a mean embedding (BagOfNgrams) | NBSVM (NaiveBayesNgrams)
POOLINGS = ("mean", "mean_max", "cls")  # model.pooling (model/classifier.py): the token vectors -> one
