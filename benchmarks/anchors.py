"""The anchors of docs/ngrams.md on this project's own splits, each as its authors publish it:

* TF-IDF (1-2-grams) + logistic regression, scikit-learn (``pip install -e ".[bench]"``): scikit-learn's
  defaults with ``ngram_range=(1, 2)``, and with ``C`` chosen on the validation split from the grid
  ``model.ngram_branch.c=auto`` chooses from (``C_GRID``: tuned against tuned), by validation accuracy
  (``LogisticRegressionCV``'s default) and by validation log-loss (what ``c=auto`` uses), each reported;
* NB-LR (Wang & Manning 2012, "Baselines and Bigrams", NBSVM with logistic regression's loss): binarized
  unigrams + bigrams (``CountVectorizer(ngram_range=(1, 2), binary=True)``), each scaled by its log-count
  ratio ``r = log((p/|p|)/(q/|q|))`` (alpha 1) from the training split, then ``LogisticRegression`` with ``C``
  chosen on the validation split; one-vs-rest ratios and models for more than two classes;
* Keras's fastText example (keras-team/keras ``examples/imdb_fasttext.py``): its n-gram code, model and
  settings unchanged (20,000 words, bigrams of the training set, the last 400 ids, 50-wide embedding,
  average pooling, adam, batch 32, 5 epochs). Only its input differs: ``keras.datasets.imdb`` downloads
  ids; here the same texts the project trains on are turned into frequency-ranked word ids by
  ``TextVectorization`` (what ``imdb.load_data`` ships precomputed).

    python benchmarks/anchors.py                                         # fine_foods, seed 42
    python benchmarks/anchors.py seed=1
    python benchmarks/anchors.py data=folder data.path=/tmp/aclImdb      # IMDB, 25k / 25k
    python benchmarks/anchors.py --tfidf-only data=folder data.path=/tmp/aclImdb   # TF-IDF and NB-LR alone
    python benchmarks/anchors.py --tfidf-only --max-n 3 data=folder data.path=/tmp/aclImdb   # 1-3-grams

``--max-n 3`` gives both linear anchors trigrams too (``ngram_range=(1, 3)``, as the bag's
``model.ngram_branch.max_n=3``).

The arguments are scripts/train.py overrides: the splits are ``instantiate(cfg.data).splits(cfg.seed)``'s.
Prints one JSON object: test accuracy and seconds per anchor.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

import numpy as np

from mha_project.extras.ngrams.options import C_GRID  # the grid model.ngram_branch.c=auto chooses from

ROOT = Path(__file__).resolve().parents[1]


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return hydra_compose(config_name="train", overrides=overrides)


def chosen(name: str, by_val: dict) -> dict:
    """``by_val``: C -> (validation accuracy, test accuracy, validation log-loss). The C each criterion chooses:
    the best validation accuracy (``LogisticRegressionCV``'s default scoring) and the lowest validation log-loss
    (``scoring="neg_log_loss"``, what ``model.ngram_branch.c=auto`` uses); ties: the stronger penalty."""
    by_accuracy = max(by_val, key=lambda c: (by_val[c][0], -c))
    by_loss = min(by_val, key=lambda c: (by_val[c][2], c))
    return {
        f"{name}_C_by_val": {"test_accuracy": by_val[by_accuracy][1], "C": by_accuracy,
                             "val_accuracy": by_val[by_accuracy][0]},
        f"{name}_C_by_val_loss": {"test_accuracy": by_val[by_loss][1], "C": by_loss,
                                  "val_log_loss": round(by_val[by_loss][2], 4)},
    }  # fmt: skip


def tfidf_logistic_regression(data, max_n: int = 2) -> dict:
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import log_loss

    start = time.perf_counter()
    vectorizer = TfidfVectorizer(ngram_range=(1, max_n))
    train = vectorizer.fit_transform(list(data.train_texts))
    val, test = vectorizer.transform(list(data.val_texts)), vectorizer.transform(list(data.test_texts))
    results = {}
    by_val = {}
    for c in C_GRID:  # 1.0, scikit-learn's default, among them
        model = LogisticRegression(C=c, max_iter=1000).fit(train, data.train_labels)
        by_val[c] = (
            model.score(val, data.val_labels), model.score(test, data.test_labels),
            log_loss(data.val_labels, model.predict_proba(val), labels=model.classes_),
        )  # fmt: skip
    results["tfidf_lr_default_C"] = {"test_accuracy": by_val[1.0][1], "C": 1.0}
    results |= chosen("tfidf_lr", by_val)
    results["tfidf_lr_seconds_all_C"] = round(time.perf_counter() - start, 1)
    return results


def nb_logistic_regression(data, max_n: int = 2) -> dict:
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import log_loss

    start = time.perf_counter()
    vectorizer = CountVectorizer(ngram_range=(1, max_n), binary=True)
    train = vectorizer.fit_transform(list(data.train_texts))
    val, test = vectorizer.transform(list(data.val_texts)), vectorizer.transform(list(data.test_texts))
    y_train = np.asarray(data.train_labels)
    classes = [1] if data.num_classes == 2 else list(range(data.num_classes))
    by_val = {}
    for c in C_GRID:
        val_scores, test_scores = [], []
        for cls in classes:  # one-vs-rest: class cls against the others
            p = 1.0 + np.asarray(train[y_train == cls].sum(axis=0)).ravel()
            q = 1.0 + np.asarray(train[y_train != cls].sum(axis=0)).ravel()
            r = np.log((p / p.sum()) / (q / q.sum()))
            model = LogisticRegression(C=c, max_iter=1000).fit(train.multiply(r).tocsr(), y_train == cls)
            val_scores.append(model.decision_function(val.multiply(r).tocsr()))
            test_scores.append(model.decision_function(test.multiply(r).tocsr()))
        if len(classes) == 1:
            val_pred, test_pred = (val_scores[0] > 0).astype(int), (test_scores[0] > 0).astype(int)
        else:
            val_pred, test_pred = np.argmax(val_scores, axis=0), np.argmax(test_scores, axis=0)
        # Each class's own probability against the rest, normalised over the classes (OneVsRestClassifier's
        # predict_proba) for the log-loss; two classes: the one model's probability.
        probability = 1.0 / (1.0 + np.exp(-np.asarray(val_scores)))
        if len(classes) == 1:
            val_proba = np.stack([1.0 - probability[0], probability[0]], axis=1)
        else:
            val_proba = (probability / probability.sum(axis=0)).T
        by_val[c] = (
            float(np.mean(val_pred == np.asarray(data.val_labels))),
            float(np.mean(test_pred == np.asarray(data.test_labels))),
            log_loss(data.val_labels, val_proba, labels=list(range(data.num_classes))),
        )
    return chosen("nb_lr", by_val) | {
        "nb_lr_test_accuracy_by_C": {str(c): v[1] for c, v in by_val.items()},
        "nb_lr_seconds_all_C": round(time.perf_counter() - start, 1),
    }


# --- keras-team/keras examples/imdb_fasttext.py, unchanged but for Keras 3 names -----------------------
def create_ngram_set(input_list, ngram_value=2):
    """
    >>> sorted(create_ngram_set([1, 4, 9, 4, 1, 4], ngram_value=2))
    [(1, 4), (4, 1), (4, 9), (9, 4)]
    """
    return set(zip(*[input_list[i:] for i in range(ngram_value)]))


def add_ngram(sequences, token_indice, ngram_range=2):
    """
    >>> add_ngram([[1, 3, 4, 5], [1, 3, 7, 9, 2]], {(1, 3): 1337, (9, 2): 42, (4, 5): 2017}, ngram_range=2)
    [[1, 3, 4, 5, 1337, 2017], [1, 3, 7, 9, 2, 1337, 42]]
    """
    new_sequences = []
    for input_list in sequences:
        new_list = input_list[:]
        for i in range(len(new_list) - ngram_range + 1):
            for ngram_value in range(2, ngram_range + 1):
                ngram = tuple(new_list[i : i + ngram_value])
                if ngram in token_indice:
                    new_list.append(token_indice[ngram])
        new_sequences.append(new_list)
    return new_sequences


def fasttext_example(data, seed: int) -> dict:
    import keras

    ngram_range, max_features, maxlen, batch_size, embedding_dims, epochs = 2, 20000, 400, 32, 50, 5
    keras.utils.set_random_seed(seed)
    start = time.perf_counter()
    # What imdb.load_data(num_words=20000) ships: each text as word ids ranked by frequency.
    words = keras.layers.TextVectorization(max_tokens=max_features)
    words.adapt(list(data.train_texts))

    x_train, x_test = _word_ids(words, data.train_texts), _word_ids(words, data.test_texts)
    ngram_set = set()
    for input_list in x_train:
        for i in range(2, ngram_range + 1):
            ngram_set.update(create_ngram_set(input_list, ngram_value=i))
    start_index = max_features + 1
    token_indice = {v: k + start_index for k, v in enumerate(ngram_set)}
    max_features = max(token_indice.values()) + 1
    x_train = keras.utils.pad_sequences(add_ngram(x_train, token_indice, ngram_range), maxlen=maxlen)
    x_test = keras.utils.pad_sequences(add_ngram(x_test, token_indice, ngram_range), maxlen=maxlen)
    model = keras.Sequential(
        [
            keras.Input((maxlen,)),
            keras.layers.Embedding(max_features, embedding_dims),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(1, activation="sigmoid"),
        ]
    )
    model.compile(loss="binary_crossentropy", optimizer="adam", metrics=["accuracy"])
    y_train, y_test = np.asarray(data.train_labels), np.asarray(data.test_labels)
    with contextlib.redirect_stdout(sys.stderr):  # the example's epoch lines; stdout stays one JSON object
        history = model.fit(
            x_train, y_train, batch_size=batch_size, epochs=epochs, validation_data=(x_test, y_test), verbose=2
        )
    return {
        "fasttext_bigram_example": {
            "test_accuracy": float(history.history["val_accuracy"][-1]),  # the example reports its last epoch
            "seconds": round(time.perf_counter() - start, 1),
            "features": int(max_features),
        }
    }


def _word_ids(words, texts) -> list[list[int]]:
    import tensorflow as tf

    out = []
    texts = list(texts)
    for begin in range(0, len(texts), 2048):
        batch = words(tf.constant(texts[begin : begin + 2048])).numpy()
        out += [[int(i) for i in row if i] for row in batch]  # 0 is TextVectorization's padding
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tfidf-only", action="store_true", help="the linear anchors alone, without fastText")
    parser.add_argument("--max-n", type=int, choices=(1, 2, 3), default=2, help="the longest n-gram (default 2)")
    args, overrides = parser.parse_known_args()
    max_n = args.max_n
    cfg = compose(overrides)
    from mha_project.quiet import import_tensorflow_quietly

    import_tensorflow_quietly()  # as the entry points do: Keras loads (and the project registers) first
    from hydra.utils import instantiate

    data = instantiate(cfg.data).splits(cfg.seed)
    results = {"dataset": data.name, "seed": int(cfg.seed), "train": len(data.train_texts), "max_n": max_n}
    results["test"] = len(data.test_texts)
    results |= tfidf_logistic_regression(data, max_n)
    results |= nb_logistic_regression(data, max_n)
    if data.num_classes == 2 and not args.tfidf_only:  # the example's sigmoid output is binary
        results |= fasttext_example(data, int(cfg.seed))
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
