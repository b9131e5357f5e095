"""Training throughput, in one process, on the same data and the same model:

(a) keras.io style: every text tokenised once and padded to ``seq_len``, ``fit(x, y)`` on NumPy arrays,
    float32, no XLA, one step per execution (what the "Text classification with Transformer" recipe does);
(b) this project: tokenised in tf.data, cached, bucketed by length (each batch padded only to its
    bucket), with the configured ``trainer`` speed options.

Warm-up (tracing; for (b) also the cache fill) is not timed; then the two alternate, one epoch each per
round. Timings are noisy on a shared CPU: compare the ratio, measured in one process, not absolute
numbers across machines.
"""

from __future__ import annotations

import math
import resource
import time

import keras
import numpy as np
from keras import layers, ops
from omegaconf import OmegaConf

from mha_project.data.pipeline import bucket_boundaries, encode, pipeline_from_cfg, pipeline_from_token_ids
from mha_project.data.sources import load_dataset
from mha_project.data.vocabulary import make_vectorizer
from mha_project.model.classifier import build_classifier
from mha_project.training.callbacks import EpochTimer
from mha_project.training.fitting import compile_classifier, expected_end_of_data


def _rss_peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux reports KiB


def _compile(model, cfg, project: bool):

    model.compile(
        optimizer=keras.optimizers.Adam(cfg.trainer.lr),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
        jit_compile=bool(cfg.trainer.jit_compile) if project else False,
        steps_per_execution=int(cfg.trainer.steps_per_execution) if project else 1,
    )


def _epoch_seconds(model, *args, **kwargs) -> float:
    start = time.perf_counter()
    model.fit(*args, epochs=1, verbose=0, **kwargs)
    return time.perf_counter() - start


@expected_end_of_data()  # scoped, as in train(): the caller's warning filters are left as they were
def run_benchmark(cfg, timed_epochs: int = 1, variants: dict | None = None) -> dict:
    """Time ``timed_epochs`` rounds; each round is one epoch of (a), of (b), then of each variant.

    ``variants`` maps a name to a full config that differs from ``cfg`` in trainer/model settings or
    ``data.bucketing``/``data.seq_len``; each is timed like (b) and reported with its ratio to (b).

    Interleaving matters on a shared CPU: speed drifts by 2x within minutes here, and timing all of (a)
    and then all of (b) would turn that drift into a fake ratio. The fastest round of each is reported.
    """
    data = load_dataset(cfg.data, cfg.seed)
    vectorizer = make_vectorizer(data.train_texts, cfg.data.vocab_size, sample=cfg.data.vocab_sample, seed=cfg.seed)
    vocab_size = vectorizer.vocabulary_size()
    seq_len, batch_size, n = cfg.data.seq_len, cfg.trainer.batch_size, len(data.train_texts)
    # (a) holds every text's ids, as keras.io does: the tokens (b) reads (data.truncation)
    rows = encode(data.train_texts, vectorizer, seq_len, cfg.data.truncation)
    lengths = np.array([len(r) for r in rows])
    if cfg.data.bucketing:
        padded = padded_lengths(lengths, seq_len, cfg.data.get("bucket_width"))
    else:
        padded = np.full_like(lengths, seq_len)

    # (a) keras.io style: padded NumPy arrays, float32, no XLA, one step per execution
    keras.mixed_precision.set_global_policy("float32")
    keras.utils.set_random_seed(cfg.seed)
    x = keras.utils.pad_sequences([list(r) for r in rows], maxlen=seq_len, padding="post").astype("int32")
    model_a = build_classifier(cfg.model, vocab_size, data.num_classes)
    _compile(model_a, cfg, project=False)
    fit_a = dict(x=x, y=np.asarray(data.train_labels), batch_size=batch_size, shuffle=True)
    model_a.fit(**fit_a, epochs=1, verbose=0)  # warm-up: tracing (the last, partial batch traces again)
    rss_a = _rss_peak_mb()

    # (b) this project, and (c) any variants of it (other trainer/model settings, same data and vocabulary)
    def project_model(run_cfg):
        # The precision policy is global in Keras: each model is built under its own, then it is reset.
        keras.mixed_precision.set_global_policy(run_cfg.trainer.precision)
        keras.utils.set_random_seed(cfg.seed)
        ds = pipeline_from_cfg(run_cfg, data.train_texts, data.train_labels, vectorizer, shuffle=True)
        model = build_classifier(run_cfg.model, vocab_size, data.num_classes)
        _compile(model, run_cfg, project=True)
        model.fit(ds, epochs=1, verbose=0)  # warm-up: tracing every bucket shape, filling the cache
        keras.mixed_precision.set_global_policy("float32")
        return model, ds

    model_b, ds = project_model(cfg)
    variants = {name: project_model(variant_cfg) for name, variant_cfg in (variants or {}).items()}

    seconds_a, seconds_b = [], []
    seconds_c = {name: [] for name in variants}
    for _ in range(timed_epochs):
        seconds_a.append(_epoch_seconds(model_a, **fit_a))
        seconds_b.append(_epoch_seconds(model_b, ds))
        for name, (model_c, ds_c) in variants.items():
            seconds_c[name].append(_epoch_seconds(model_c, ds_c))
    rss_b = _rss_peak_mb()

    # The fastest round of each, as timeit does: on a shared CPU noise only ever slows an epoch down.
    a = n / min(seconds_a)
    b = n / min(seconds_b)
    return {
        "keras_io_style": {
            "examples_per_second": round(a, 1),
            "seconds_per_epoch": [round(t, 3) for t in seconds_a],
            "tokens_per_example": seq_len,
        },
        "project": {
            "examples_per_second": round(b, 1),
            "seconds_per_epoch": [round(t, 3) for t in seconds_b],
            "mean_real_tokens_per_example": round(float(lengths.mean()), 1),
            "mean_padded_tokens_per_example": round(float(padded.mean()), 1),
        },
        # What skipping padding alone can buy, if (b) ran each token as fast as (a): the ratio of the
        # tokens each side computes, and of the T x T attention entries (per example, summed).
        "padding_bound": {
            "tokens": round(seq_len / float(padded.mean()), 3),
            "attention_entries": round(seq_len**2 / float((padded.astype("float64") ** 2).mean()), 3),
        },
        "ratio": round(b / a, 3),
        "ratio_per_round": [round(ta / tb, 3) for ta, tb in zip(seconds_a, seconds_b)],
        "variants": {
            name: {
                "examples_per_second": round(n / min(times), 1),
                "seconds_per_epoch": [round(t, 3) for t in times],
                "ratio_to_project": round(min(seconds_b) / min(times), 3),
                "ratio_to_project_per_round": [round(tb / tc, 3) for tb, tc in zip(seconds_b, times)],
            }
            for name, times in seconds_c.items()
        },
        "peak_rss_mb": {"after_keras_io_style": round(rss_a, 1), "after_project": round(rss_b, 1)},
        "train_examples": n,
        "timed_epochs": timed_epochs,
        "config": {
            "dataset": data.name,
            "seq_len": seq_len,
            "truncation": cfg.data.truncation,
            "batch_size": batch_size,
            "model": OmegaConf.to_container(cfg.model, resolve=True),
            "trainer": {
                k: OmegaConf.select(cfg, f"trainer.{k}") for k in ("jit_compile", "steps_per_execution", "precision")
            },
            "bucketing": bool(cfg.data.bucketing),
            "bucket_width": cfg.data.get("bucket_width"),
        },
    }


def padded_lengths(lengths, seq_len: int, bucket_width: int | None = None) -> np.ndarray:
    """The length each text is padded to in its bucketed batch: its bucket's edge.

    >>> padded_lengths(np.array([3, 16, 17, 100, 200]), seq_len=256, bucket_width=64).tolist()
    [16, 16, 32, 128, 256]
    """
    bounds = np.asarray(bucket_boundaries(seq_len, bucket_width), "int64")
    return bounds[np.searchsorted(bounds, np.minimum(lengths, seq_len), side="left")]


# ---- time to accuracy: the published keras.io recipe against this project, in one process -------------

# "Text classification with Transformer" (keras.io/examples/nlp/text_classification_with_transformer),
# as published: 20k words, the last 200 tokens of each review (pad_sequences pads and truncates at the
# front), no padding mask, embed 32, 2 heads x key_dim 32, ff 32, Adam 1e-3, batch 32, 2 epochs.
RECIPE = {"vocab_size": 20000, "maxlen": 200, "embed_dim": 32, "num_heads": 2, "ff_dim": 32, "batch_size": 32}
RECIPE_EPOCHS = 2


def keras_io_recipe_model(num_classes: int = 2):
    """The recipe's model, line for line (its two layers are defined inline there, as here)."""

    class TransformerBlock(layers.Layer):
        def __init__(self, embed_dim, num_heads, ff_dim, rate=0.1):
            super().__init__()
            self.att = layers.MultiHeadAttention(num_heads=num_heads, key_dim=embed_dim)
            self.ffn = keras.Sequential([layers.Dense(ff_dim, activation="relu"), layers.Dense(embed_dim)])
            self.layernorm1 = layers.LayerNormalization(epsilon=1e-6)
            self.layernorm2 = layers.LayerNormalization(epsilon=1e-6)
            self.dropout1 = layers.Dropout(rate)
            self.dropout2 = layers.Dropout(rate)

        def call(self, inputs):
            attn_output = self.att(inputs, inputs)
            attn_output = self.dropout1(attn_output)
            out1 = self.layernorm1(inputs + attn_output)
            ffn_output = self.ffn(out1)
            ffn_output = self.dropout2(ffn_output)
            return self.layernorm2(out1 + ffn_output)

    class TokenAndPositionEmbedding(layers.Layer):
        def __init__(self, maxlen, vocab_size, embed_dim):
            super().__init__()
            self.token_emb = layers.Embedding(input_dim=vocab_size, output_dim=embed_dim)
            self.pos_emb = layers.Embedding(input_dim=maxlen, output_dim=embed_dim)

        def call(self, x):
            maxlen = ops.shape(x)[-1]
            positions = ops.arange(start=0, stop=maxlen, step=1)
            positions = self.pos_emb(positions)
            x = self.token_emb(x)
            return x + positions

    inputs = layers.Input(shape=(RECIPE["maxlen"],))
    x = TokenAndPositionEmbedding(RECIPE["maxlen"], RECIPE["vocab_size"], RECIPE["embed_dim"])(inputs)
    x = TransformerBlock(RECIPE["embed_dim"], RECIPE["num_heads"], RECIPE["ff_dim"])(x)
    x = layers.GlobalAveragePooling1D()(x)
    x = layers.Dropout(0.1)(x)
    x = layers.Dense(20, activation="relu")(x)
    x = layers.Dropout(0.1)(x)
    outputs = layers.Dense(num_classes, activation="softmax")(x)
    model = keras.Model(inputs=inputs, outputs=outputs)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def recipe_arrays(rows: list[np.ndarray], maxlen: int) -> np.ndarray:
    """``keras.utils.pad_sequences(rows, maxlen)`` as the recipe calls it: keep the last ``maxlen`` ids,
    pad at the front.

    >>> recipe_arrays([np.array([1, 2, 3]), np.array([4])], maxlen=2).tolist()
    [[2, 3], [0, 4]]
    """
    return keras.utils.pad_sequences([list(r) for r in rows], maxlen=maxlen).astype("int32")


def run_time_to_accuracy(
    cfg, target: float, round_fraction: float = 0.25, max_rounds: int | None = None, repeats: int = 1
) -> dict:
    """Train (a) the keras.io recipe and (b) this project (``cfg``) in alternating rounds of
    ``round_fraction`` of an epoch, on the same examples in the same order, each with its own clock
    (training only: each side's validation after every round is not on its clock), until both reach
    ``val_accuracy >= target`` or run out of epochs (the recipe's 2, the project's ``trainer.epochs``).

    ``repeats`` > 1 trains both from scratch again (same seed: same weights, order and accuracies)
    and adds a ``repeats`` entry with every repeat's times and ratio, and their median. This CPU's
    speed flips by 2x within a minute, so one run's ratio depends on which side's rounds landed in
    the slow phase; the median of a few repeats in one process is the figure to quote.
    """
    data = load_dataset(cfg.data, cfg.seed)
    # Tokenising is done once for each side, before any clock starts.
    recipe_vectorizer = make_vectorizer(data.train_texts, RECIPE["vocab_size"])
    full = 10**9  # the recipe keeps each review whole until pad_sequences cuts it
    recipe_inputs = {
        split: recipe_arrays(encode(texts, recipe_vectorizer, full), RECIPE["maxlen"])
        for split, texts in (("train", data.train_texts), ("val", data.val_texts), ("test", data.test_texts))
    }
    vectorizer = make_vectorizer(data.train_texts, cfg.data.vocab_size, sample=cfg.data.vocab_sample, seed=cfg.seed)
    project_inputs = {
        "train": encode(data.train_texts, vectorizer, int(cfg.data.seq_len), cfg.data.truncation),
        "val": pipeline_from_cfg(cfg, data.val_texts, data.val_labels, vectorizer, shuffle=False),
        "test": pipeline_from_cfg(cfg, data.test_texts, data.test_labels, vectorizer, shuffle=False),
    }
    runs = [
        _race_to_accuracy(cfg, data, recipe_inputs, project_inputs, vectorizer, target, round_fraction, max_rounds)
        for _ in range(repeats)
    ]
    keras.mixed_precision.set_global_policy("float32")
    result = runs[0]
    if repeats > 1:
        ratios = [run["ratio"] for run in runs]
        reached = [r for r in ratios if r is not None]
        result["repeats"] = {
            "n": repeats,
            "ratio_per_repeat": ratios,
            # over the repeats where both sides reached the target
            "ratio_median": round(float(np.median(reached)), 3) if reached else None,
            **{
                f"{field}_per_repeat": {side: [run[side][field] for run in runs] for side in SIDES}
                for field in (
                    "seconds_to_target",
                    "epochs_to_target",
                    "train_seconds_per_round",
                    "val_accuracy_per_round",
                )
            },
        }
    return result


SIDES = ("keras_io_recipe", "project")


def _race_to_accuracy(cfg, data, recipe_inputs, project_inputs, vectorizer, target, round_fraction, max_rounds):
    """One run of :func:`run_time_to_accuracy`: fresh models, both sides' rounds, one report."""
    n = len(data.train_texts)
    train_labels, val_labels = np.asarray(data.train_labels), np.asarray(data.val_labels)
    rounds_per_epoch = max(1, round(1 / round_fraction))
    rng = np.random.default_rng(cfg.seed)
    x_a, val_a, test_a = recipe_inputs["train"], recipe_inputs["val"], recipe_inputs["test"]
    rows_b, val_b, test_b = project_inputs["train"], project_inputs["val"], project_inputs["test"]
    seq_len = int(cfg.data.seq_len)
    bucket_options = dict(bucketing=bool(cfg.data.bucketing), bucket_width=cfg.data.get("bucket_width"))

    keras.utils.set_random_seed(cfg.seed)
    keras.mixed_precision.set_global_policy("float32")
    model_a = keras_io_recipe_model(data.num_classes)
    keras.mixed_precision.set_global_policy(cfg.trainer.precision)
    model_b = build_classifier(cfg.model, vectorizer.vocabulary_size(), data.num_classes)
    # Batches per epoch for the schedule: one partial batch per length bucket in every round.
    buckets = len(bucket_boundaries(seq_len, bucket_options["bucket_width"])) if bucket_options["bucketing"] else 1
    batches_per_epoch = math.ceil(n / cfg.trainer.batch_size) + rounds_per_epoch * buckets
    compile_classifier(model_b, cfg.trainer, total_steps=batches_per_epoch * int(cfg.trainer.epochs))

    limit_a = RECIPE_EPOCHS * rounds_per_epoch
    limit_b = int(cfg.trainer.epochs) * rounds_per_epoch
    total_rounds = max(limit_a, limit_b) if max_rounds is None else min(max(limit_a, limit_b), max_rounds)
    sides = {
        "keras_io_recipe": {"seconds": [], "val_accuracy": [], "examples": 0, "reached": None, "limit": limit_a},
        "project": {"seconds": [], "val_accuracy": [], "examples": 0, "reached": None, "limit": limit_b},
    }
    order = None
    with expected_end_of_data():
        for r in range(total_rounds):
            if r % rounds_per_epoch == 0:
                order = rng.permutation(n)  # one shuffle per epoch, shared by both sides
            part = np.array_split(order, rounds_per_epoch)[r % rounds_per_epoch]
            for name, side in sides.items():
                if r >= side["limit"] or side["reached"] is not None:
                    continue
                if name == "keras_io_recipe":
                    start = time.perf_counter()
                    model_a.fit(x_a[part], train_labels[part], batch_size=RECIPE["batch_size"], epochs=1, verbose=0)
                    seconds = time.perf_counter() - start
                    _, val_accuracy = model_a.evaluate(val_a, val_labels, batch_size=256, verbose=0)
                else:
                    ds = pipeline_from_token_ids(
                        [rows_b[i] for i in part],
                        train_labels[part],
                        seq_len,
                        int(cfg.trainer.batch_size),
                        shuffle=True,
                        seed=int(cfg.seed) + r,
                        **bucket_options,
                    )
                    start = time.perf_counter()
                    model_b.fit(ds, epochs=1, verbose=0, shuffle=False)
                    seconds = time.perf_counter() - start
                    _, val_accuracy = model_b.evaluate(val_b, verbose=0)
                side["seconds"].append(seconds)
                side["val_accuracy"].append(float(val_accuracy))
                side["examples"] += len(part)
                if val_accuracy >= target:
                    side["reached"] = r + 1
            if all(s["reached"] is not None or r + 1 >= s["limit"] for s in sides.values()):
                break
        _, test_a_accuracy = model_a.evaluate(test_a, np.asarray(data.test_labels), batch_size=256, verbose=0)
        _, test_b_accuracy = model_b.evaluate(test_b, verbose=0)

    def report(side, test_accuracy):
        reached = side["reached"]
        return {
            "seconds_to_target": round(sum(side["seconds"][:reached]), 2) if reached else None,
            "epochs_to_target": round(reached / rounds_per_epoch, 3) if reached else None,
            "rounds": len(side["seconds"]),
            "train_seconds_per_round": [round(t, 2) for t in side["seconds"]],
            "val_accuracy_per_round": [round(v, 4) for v in side["val_accuracy"]],
            "examples_per_second": round(side["examples"] / max(sum(side["seconds"]), 1e-9), 1),
            "test_accuracy": round(float(test_accuracy), 4),
        }

    a = report(sides["keras_io_recipe"], test_a_accuracy)
    b = report(sides["project"], test_b_accuracy)
    both = a["seconds_to_target"] is not None and b["seconds_to_target"] is not None
    return {
        "target_val_accuracy": target,
        "round_fraction": 1 / rounds_per_epoch,
        "keras_io_recipe": a,
        "project": b,
        # project time / recipe time to the target: the goal is <= 0.5
        "ratio": round(b["seconds_to_target"] / a["seconds_to_target"], 3) if both else None,
        "train_examples": n,
        "val_examples": len(data.val_texts),
        "config": {
            "dataset": data.name,
            "recipe": dict(RECIPE, epochs=RECIPE_EPOCHS, optimizer="adam 1e-3", mask=False),
            "project": {
                "seq_len": seq_len,
                "truncation": cfg.data.truncation,
                "batch_size": int(cfg.trainer.batch_size),
                "epochs": int(cfg.trainer.epochs),
                "lr": float(cfg.trainer.lr),
                "model": OmegaConf.to_container(cfg.model, resolve=True),
                **bucket_options,
            },
        },
    }


# ---- memory as the data grows --------------------------------------------------------------------


def run_memory_probe(cfg, steps: int = 200) -> dict:
    """What ``train.py`` holds in memory for ``cfg``'s data: load the splits, build the vocabulary
    (``data.vocab_sample``) and the training pipeline (its first pass tokenises and caches every text),
    then train ``steps`` batches. Reports peak RSS after each stage and training examples/s."""
    peak = {}
    start = time.perf_counter()
    data = load_dataset(cfg.data, cfg.seed)
    peak["after_loading"] = _rss_peak_mb()
    vectorizer = make_vectorizer(
        data.train_texts, cfg.data.vocab_size, sample=cfg.data.vocab_sample, seed=int(cfg.seed)
    )
    peak["after_vocabulary"] = _rss_peak_mb()
    ds = pipeline_from_cfg(cfg, data.train_texts, data.train_labels, vectorizer, shuffle=True)
    batches = int(ds.cardinality())
    peak["after_pipeline"] = _rss_peak_mb()
    prepare_seconds = time.perf_counter() - start

    keras.utils.set_random_seed(int(cfg.seed))
    model = build_classifier(cfg.model, vectorizer.vocabulary_size(), data.num_classes)
    compile_classifier(model, cfg.trainer, total_steps=batches)
    steps = min(steps, batches)
    timer = EpochTimer()
    with expected_end_of_data():
        # Two "epochs" of `steps` batches on one iterator: the first traces and fills the shuffle
        # buffer, the second is timed.
        model.fit(ds.repeat(), steps_per_epoch=steps, epochs=2, verbose=0, shuffle=False, callbacks=[timer])
    seconds = timer.seconds[-1]
    peak["after_training"] = _rss_peak_mb()
    return {
        "train_texts": len(data.train_texts),
        "texts_held_as": type(data.train_texts).__name__,
        "peak_rss_mb": {k: round(v, 1) for k, v in peak.items()},
        "prepare_seconds": round(prepare_seconds, 1),
        "train_steps": steps,
        "train_examples_per_second": round(steps * int(cfg.trainer.batch_size) / seconds, 1),
        "vocab_sample": cfg.data.vocab_sample,
    }
