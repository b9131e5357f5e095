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

import resource
import time

import numpy as np
from omegaconf import OmegaConf


def _rss_peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux reports KiB


def _compile(model, cfg, project: bool):
    import keras

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
    import warnings

    import keras

    from mha_project.data import load_dataset, make_vectorizer, pipeline_from_cfg
    from mha_project.model import build_classifier

    warnings.filterwarnings("ignore", message="Your input ran out of data")
    data = load_dataset(cfg.data, cfg.seed)
    vectorizer = make_vectorizer(data.train_texts, cfg.data.vocab_size)
    vocab_size = vectorizer.vocabulary_size()
    seq_len, batch_size, n = cfg.data.seq_len, cfg.trainer.batch_size, len(data.train_texts)
    lengths = np.array([min(len(r), seq_len) for r in vectorizer(np.asarray(data.train_texts, dtype=object)).numpy()])

    # (a) keras.io style: padded NumPy arrays, float32, no XLA, one step per execution
    keras.mixed_precision.set_global_policy("float32")
    keras.utils.set_random_seed(cfg.seed)
    pad = keras.layers.TextVectorization(
        output_mode="int",
        output_sequence_length=seq_len,
        vocabulary=vectorizer.get_vocabulary(include_special_tokens=False),
    )
    x = np.asarray(pad(np.asarray(data.train_texts, dtype=object)))
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
            "batch_size": batch_size,
            "model": OmegaConf.to_container(cfg.model, resolve=True),
            "trainer": {
                k: OmegaConf.select(cfg, f"trainer.{k}") for k in ("jit_compile", "steps_per_execution", "precision")
            },
            "bucketing": bool(cfg.data.bucketing),
            "bucket_width": cfg.data.get("bucket_width"),
        },
    }
