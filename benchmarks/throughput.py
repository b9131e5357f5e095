"""Training throughput, in one process, on the same data and the same model:

(a) keras.io style: every text tokenised once and padded to ``seq_len``, ``fit(x, y)`` on NumPy arrays,
    float32, no XLA, one step per execution (what the "Text classification with Transformer" recipe does);
(b) this project: tokenised in tf.data, cached, bucketed by length (each batch padded only to its
    bucket), with the configured ``trainer`` speed options.

Warm-up (tracing; for (b) also the cache fill) is not timed; then the two alternate, one epoch each per
round. Timings are noisy on a shared CPU: compare the ratio, measured in one process, not absolute
numbers across machines. Also here: the memory probe (peak RSS as the data grows).
"""

from __future__ import annotations

import resource
import time

import keras
import numpy as np
from hydra.utils import instantiate
from omegaconf import OmegaConf

from benchmarks import expected_end_of_data
from mha_project.data.pipeline import TextPreprocessor, bucket_boundaries
from mha_project.data.vocabulary import make_vectorizer
from mha_project.training.train import build_model, compile_model


class EpochTimer(keras.callbacks.Callback):
    """Wall seconds of each epoch (the memory probe times its second, warm epoch)."""

    def __init__(self):
        super().__init__()
        self.seconds = []

    def on_epoch_begin(self, epoch, logs=None):
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds.append(time.perf_counter() - self._start)


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


def run_benchmark(cfg, timed_epochs: int = 1, variants: dict | None = None) -> dict:
    """Time ``timed_epochs`` rounds; each round is one epoch of (a), of (b), then of each variant.

    ``variants`` maps a name to a full config that differs from ``cfg`` in trainer/model settings or
    ``data.bucketing``/``data.seq_len``; each is timed like (b) and reported with its ratio to (b).

    Interleaving matters on a shared CPU: speed drifts by 2x within minutes here, and timing all of (a)
    and then all of (b) would turn that drift into a fake ratio. The fastest round of each is reported.
    """
    data = instantiate(cfg.data).splits(cfg.seed)
    vectorizer = make_vectorizer(data.train_texts, cfg.data.vocab_size, sample=cfg.data.vocab_sample, seed=cfg.seed)
    vocab_size = vectorizer.vocabulary_size()
    seq_len, batch_size = cfg.data.seq_len, cfg.trainer.batch_size
    # (a) holds every text's ids, as keras.io does: the tokens (b) reads (data.truncation)
    rows = TextPreprocessor(vectorizer, cfg.data.seq_len, cfg.data.truncation).encode(data.train_texts)
    lengths = np.array([len(r) for r in rows])
    if cfg.data.bucketing:
        padded = padded_lengths(lengths, seq_len, cfg.data.get("bucket_width"))
    else:
        padded = np.full_like(lengths, seq_len)

    # (a) keras.io style: padded NumPy arrays, float32, no XLA, one step per execution
    keras.mixed_precision.set_global_policy("float32")
    keras.utils.set_random_seed(cfg.seed)
    x = keras.utils.pad_sequences([list(r) for r in rows], maxlen=seq_len, padding="post").astype("int32")
    model_a = build_model(cfg, vocab_size, data.num_classes)
    _compile(model_a, cfg, project=False)
    fit_a = dict(x=x, y=np.asarray(data.train_labels), batch_size=batch_size, shuffle=True)
    model_a.fit(**fit_a, epochs=1, verbose=0)  # warm-up: tracing (the last, partial batch traces again)
    rss_a = _rss_peak_mb()

    # (b) this project, and (c) any variants of it (other trainer/model settings, same data and vocabulary)
    def project_model(run_cfg):
        # The precision policy is global in Keras: each model is built under its own, then it is reset.
        keras.mixed_precision.set_global_policy(run_cfg.trainer.precision)
        keras.utils.set_random_seed(cfg.seed)
        words = TextPreprocessor(vectorizer, run_cfg.data.seq_len, run_cfg.data.truncation)
        ds = instantiate(run_cfg.data).pipeline(
            data.train_texts, data.train_labels, words, run_cfg.trainer.batch_size, run_cfg.seed, shuffle=True
        )
        model = build_model(run_cfg, vocab_size, data.num_classes)
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

    return _report(cfg, data, lengths, padded, seconds_a, seconds_b, seconds_c, (rss_a, rss_b), timed_epochs)


def _report(cfg, data, lengths, padded, seconds_a, seconds_b, seconds_c, rss, timed_epochs) -> dict:
    n, seq_len = len(data.train_texts), cfg.data.seq_len
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
        "peak_rss_mb": {"after_keras_io_style": round(rss[0], 1), "after_project": round(rss[1], 1)},
        "train_examples": n,
        "timed_epochs": timed_epochs,
        "config": {
            "dataset": data.name,
            "seq_len": seq_len,
            "truncation": cfg.data.truncation,
            "batch_size": cfg.trainer.batch_size,
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


def run_memory_probe(cfg, steps: int = 200) -> dict:
    """What ``train.py`` holds in memory for ``cfg``'s data: load the splits, build the vocabulary
    (``data.vocab_sample``) and the training pipeline (its first pass tokenises and caches every text),
    then train ``steps`` batches. Reports peak RSS after each stage and training examples/s."""
    peak = {}
    start = time.perf_counter()
    data = instantiate(cfg.data).splits(cfg.seed)
    peak["after_loading"] = _rss_peak_mb()
    vectorizer = make_vectorizer(
        data.train_texts, cfg.data.vocab_size, sample=cfg.data.vocab_sample, seed=int(cfg.seed)
    )
    peak["after_vocabulary"] = _rss_peak_mb()
    words = TextPreprocessor(vectorizer, cfg.data.seq_len, cfg.data.truncation)
    ds = instantiate(cfg.data).pipeline(
        data.train_texts, data.train_labels, words, cfg.trainer.batch_size, cfg.seed, shuffle=True
    )
    batches = int(ds.cardinality())
    peak["after_pipeline"] = _rss_peak_mb()
    prepare_seconds = time.perf_counter() - start

    keras.utils.set_random_seed(int(cfg.seed))
    model = build_model(cfg, vectorizer.vocabulary_size(), data.num_classes)
    compile_model(model, cfg, total_steps=batches)
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
