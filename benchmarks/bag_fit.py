"""Where the NB bag's accuracy goes: the same features (``ngram_inputs``, the training split's n-grams the bag
keeps) and ratios (``NaiveBayesNgrams.adapt``) fit three ways, on the project's own splits (docs/ngrams.md).

* scikit-learn: one ``LogisticRegression`` per class on the class's ratio-scaled copy (NB-LR, one-vs-rest),
  fit to convergence;
* full-batch Adam on the bag's own objective (the mean loss plus ``|w|^2 / (2 C n)``), for ``--steps``
  steps: one softmax over the classes (what the bag trains) and K binary losses (one-vs-rest), so the two
  objectives are compared with the optimiser taken out of the question.

The model's mini-batch run (``python scripts/train.py experiment=wide_deep model/backbone=none``)
is the fourth figure to set beside them.

    pip install -e ".[bench]"
    python benchmarks/bag_fit.py --c 0.2 data=table data.path=/tmp/wheel_datasets/news_outlets.csv \\
        data.label_column=outlet data.test_fraction=0.2 seed=1

The arguments after the options are scripts/train.py overrides (``data=``, ``seed=``, ``model.ngram_branch.*``).
Prints one JSON object: test (and validation) accuracy of each fit.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from anchors import compose  # noqa: E402  (the same composed config as the anchors)


def bag_ngrams(texts, max_n: int) -> np.ndarray:
    """The bag's own input for ``texts``: each text's distinct n-grams (their ids) and their counts."""
    import tensorflow as tf

    from mha_project.extras.ngrams.layers import ngram_inputs

    return ngram_inputs(tf.constant(list(texts)), max_n)["ngrams"].numpy()


def binary_matrix(ngrams: np.ndarray, bag):
    """The distinct n-grams of :func:`bag_ngrams` as the bag's binary features, a scipy matrix (texts x
    features; feature 0, the n-grams it does not keep, has ratio 0)."""
    import scipy.sparse as sp

    rows, slots = np.nonzero(ngrams[..., 1] > 0)
    features = np.asarray(bag.feature_of(ngrams[rows, slots, 0]))
    values = np.ones(len(rows), "float32")
    return sp.csr_matrix((values, (rows, features)), shape=(len(ngrams), bag.features))


def scikit_learn_nb_lr(x, y, ratios, c: float, splits: dict) -> dict:
    from sklearn.linear_model import LogisticRegression

    scores = {name: np.zeros((part.shape[0], ratios.shape[1])) for name, (part, _) in splits.items()}
    for k in range(ratios.shape[1]):
        model = LogisticRegression(C=c, max_iter=1000).fit(x.multiply(ratios[:, k]).tocsr(), y == k)
        for name, (part, _) in splits.items():
            scores[name][:, k] = model.decision_function(part.multiply(ratios[:, k]).tocsr())
    return {name: float(np.mean(scores[name].argmax(1) == labels)) for name, (_, labels) in splits.items()}


def full_batch_adam(x, y, ratios, c: float, splits: dict, one_vs_rest: bool, steps: int, lr: float) -> dict:
    import keras
    import tensorflow as tf

    def tensor(m):
        m = m.tocoo()
        return tf.sparse.reorder(tf.SparseTensor(np.stack([m.row, m.col], 1).astype("int64"), m.data, m.shape))

    train, r = tensor(x), tf.constant(ratios, tf.float32)
    kernel = tf.Variable(tf.zeros(ratios.shape))
    bias = tf.Variable(tf.zeros(ratios.shape[1]))
    targets = tf.one_hot(y, ratios.shape[1])
    optimizer = keras.optimizers.Adam(lr)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            logits = tf.sparse.sparse_dense_matmul(train, r * kernel) + bias
            if one_vs_rest:
                losses = tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(targets, logits), axis=-1)
            else:
                losses = tf.nn.softmax_cross_entropy_with_logits(targets, logits)
            loss = tf.reduce_mean(losses) + tf.reduce_sum(kernel**2) / (2.0 * c * len(y))
        optimizer.apply_gradients(zip(tape.gradient(loss, [kernel, bias]), [kernel, bias]))

    for _ in range(steps):
        step()
    accuracy = {}
    for name, (part, labels) in splits.items():
        logits = tf.sparse.sparse_dense_matmul(tensor(part), r * kernel) + bias
        accuracy[name] = float(np.mean(tf.argmax(logits, 1).numpy() == labels))
    return accuracy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--c", type=float, default=0.2, help="scikit-learn's C, the bag's model.ngram_branch.c")
    parser.add_argument("--steps", type=int, default=500, help="full-batch Adam steps (default 500)")
    parser.add_argument("--lr", type=float, default=0.01, help="full-batch Adam's rate (default 0.01)")
    args, overrides = parser.parse_known_args()
    cfg = compose(overrides)

    from hydra.utils import instantiate

    from mha_project.extras.ngrams.layers import NaiveBayesNgrams

    data = instantiate(cfg.data).splits(cfg.seed)
    max_n = cfg.model.ngram_branch.max_n
    train_ngrams, y = bag_ngrams(data.train_texts, max_n), np.asarray(data.train_labels)
    bag = NaiveBayesNgrams(data.num_classes, cfg.model.ngram_branch.features, max_n)  # the model's features and ratios
    bag.adapt([({"ngrams": train_ngrams}, y)])
    x = binary_matrix(train_ngrams, bag)
    splits = {}
    for split in ("val", "test"):
        texts, labels = getattr(data, f"{split}_texts"), getattr(data, f"{split}_labels")
        splits[split] = (binary_matrix(bag_ngrams(texts, max_n), bag), np.asarray(labels))
    ratios = np.asarray(bag.ratios)
    report = {"C": args.c, "classes": data.num_classes, "train_texts": len(y)}
    report["scikit_learn_nb_lr"] = scikit_learn_nb_lr(x, y, ratios, args.c, splits)
    for name, one_vs_rest in (("full_batch_softmax", False), ("full_batch_one_vs_rest", True)):
        report[name] = full_batch_adam(x, y, ratios, args.c, splits, one_vs_rest, args.steps, args.lr)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
