"""The n-gram branch (mha_project/extras/ngrams, model.ngram_branch): the n-grams it reads from the whole raw
text, its layers and classifier, its own learning rate; it trains beside the encoder or alone, in-process from
composed configs, and its run exports a SavedModel that answers raw strings as model.keras does (those marked
slow)."""

import json
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras.src.testing import TestCase  # Keras's own layer test harness (not public API)

from conftest import (
    QUIET,
    ROOT,
    compose_cfg,
    event_records,
    load_splits,
    run_script,
    small_model,
    write_folder_dataset,
)
from mha_project.errors import UserError
from mha_project.extras.analysis.runs import load_run
from mha_project.extras.ngrams.layers import NGRAM_IDS, ngram_inputs
from mha_project.model.backbone import EncoderBackbone, encoder_blocks
from mha_project.training.train import build_model, compile_model, train

TEXTS = ["great coffee, would buy again", "stale, bitter! and late?", "ok", ""]
# The wide-and-deep classifier beside the encoder, and the bag alone.
BRANCH = {"bigram": ["model=wide_deep"], "bigram_alone": ["model=wide_deep", "model.backbone=null"]}


def trained(run_dir: Path, *overrides: str) -> dict:
    """``scripts/train.py`` (in process) with ``overrides``: the run, and what its Hydra callbacks write (export/)."""
    import json

    result = run_script("train.py", *overrides, f"hydra.run.dir={run_dir}")
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((run_dir / "metrics.json").read_text())


def served_and_kept(run_dir: Path):
    run = load_run(run_dir)
    exported = tf.saved_model.load(str(run_dir / "export"))  # held: its variables live with it
    served = exported.serve(tf.constant(TEXTS))["scores"].numpy()
    return served, np.asarray(run.model.predict(run.model_inputs(TEXTS), verbose=0)), run


@pytest.mark.slow
def test_ngram_lr_gives_the_branch_its_own_optimizer_and_one_step_moves_it_further():
    overrides = (
        "debug=tiny",
        "model=wide_deep",
        "model/ngram_branch=mean",
        "model.ngram_branch.features=64",
        "lr=0.001",
    )
    shared, own = (
        compose_cfg(*overrides, *extra)
        for extra in (
            (),
            (
                "optimizer=wide_deep",
                "optimizer.ngram_lr=0.1",
            ),
        )
    )
    moved = {}
    for name, cfg in (("shared", shared), ("own", own)):
        keras.utils.set_random_seed(0)
        model = build_model(cfg, vocab_size=50, num_classes=2)
        compile_model(model, cfg, total_steps=100)
        several = isinstance(model.optimizer, keras.optimizers.MultiOptimizer)
        assert several == (name == "own") and (not several or len(model.optimizer.optimizers) == 2)
        table = model.get_layer("ngram_branch").embedding.embeddings
        before = np.array(table)
        inputs = {"token_ids": np.array([[5, 6, 7, 0], [8, 9, 0, 0]], "int32"), **model.text_inputs(TEXTS[:2])}
        for _ in range(3):  # past the warm-up's first step, whose rate is 0
            model.train_on_batch(inputs, np.array([0, 1]))
        moved[name] = float(np.abs(np.array(table) - before).max())
    # Adam's step is about the rate whatever the gradient's size: 100x the rate, about 100x the move.
    assert moved["own"] > 30 * moved["shared"] > 0


@pytest.mark.slow
def test_the_wide_and_deep_run_exports_what_model_keras_answers(tmp_path: Path):
    run_dir = tmp_path / "run"
    overrides = ("debug=tiny", "model=wide_deep", "model/ngram_branch=mean", "model.ngram_branch.features=1024")
    metrics = trained(run_dir, *overrides, "model.backbone.local_conv=3")  # a convolution in the encoder too
    assert metrics["hparams"]["ngram_branch"] == "BagOfNgrams" and metrics["hparams"]["local_conv"] == 3
    served, kept, run = served_and_kept(run_dir)
    np.testing.assert_allclose(served, kept, atol=1e-5)
    branch = run.model.get_layer("ngram_branch")
    assert branch.features == 1024 and run.model.get_layer("wide_and_deep") is not None
    assert run.model.backbone.get_layer("local_conv").width == 3
    assert (run_dir / "attention.html").exists()  # the encoder's attention is still there to look at
    load_run(run_dir, needs_attention=True)


@pytest.mark.slow
@pytest.mark.parametrize("branch", ["bigram", "bigram_alone"])
def test_the_nb_branch_takes_its_ratios_from_the_training_labels_alone_and_exports_them(tmp_path: Path, branch):
    from mha_project.extras.ngrams.layers import NaiveBayesNgrams

    run_dir = tmp_path / "run"
    overrides = ("debug=tiny", *BRANCH[branch], "model/ngram_branch=nb", "model.ngram_branch.features=512")
    cfg = compose_cfg(*overrides)
    metrics = trained(run_dir, *overrides)
    assert metrics["hparams"]["ngram_branch"] == "NaiveBayesNgrams" and metrics["test_accuracy"] > 0
    served, kept, run = served_and_kept(run_dir)
    np.testing.assert_allclose(served, kept, atol=1e-5)  # the SavedModel carries the ratios too
    saved = np.asarray(run.model.get_layer("ngram_branch").ratios)
    data = load_splits(cfg.data, cfg.seed)

    def ratios(texts, labels):
        layer = NaiveBayesNgrams(2, features=512)
        layer.adapt(run.batches(texts, labels).as_numpy_iterator())
        return np.asarray(layer.ratios)

    np.testing.assert_allclose(saved, ratios(data.train_texts, data.train_labels), rtol=1e-5, atol=1e-6)
    with_val = ratios([*data.train_texts, *data.val_texts], np.concatenate([data.train_labels, data.val_labels]))
    assert not np.allclose(saved, with_val, atol=1e-4)  # validation labels would change them: they never enter


@pytest.mark.subprocess
@pytest.mark.slow
def test_the_bag_alone_trains_and_the_attention_tools_say_it_has_none(tmp_path: Path):
    run_dir = tmp_path / "run"
    bag = ("model=wide_deep", "model.backbone=null", "model.ngram_branch.features=1024")
    result = run_script("train.py", "debug=tiny", *bag, f"hydra.run.dir={run_dir}")
    assert result.returncode == 0, result.stderr[-3000:]
    steps = result.stdout.split("next:")[1]
    assert "evaluate.py" in steps and "inspect_attention.py" not in steps and "head_patterns.py" not in steps
    for script in ("inspect_attention.py", "head_patterns.py", "head_importance.py"):
        extra = ["great tea"] if script == "inspect_attention.py" else []
        # A fresh process: the refusal must come from the run's config, before TensorFlow is imported.
        probe = (
            "import runpy, sys\n"
            "sys.path.insert(0, 'scripts')\n"  # as `python scripts/...` puts the script's folder first
            f"sys.argv = [{script!r}, {str(run_dir)!r}, *{extra!r}]\n"
            f"try:\n    runpy.run_path('scripts/{script}', run_name='__main__')\n"
            "finally:\n    print('tensorflow imported:', 'tensorflow' in sys.modules)\n"
        )
        refused = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert refused.returncode == 2 and "holds a model without attention layers (a bag of n-grams" in refused.stderr
        assert "Traceback" not in refused.stderr and "tensorflow imported: False" in refused.stdout
    served, kept, run = served_and_kept(run_dir)
    np.testing.assert_allclose(served, kept, atol=1e-5)
    assert not any(isinstance(layer, keras.layers.MultiHeadAttention) for layer in run.model._flatten_layers())
    assert not (run_dir / "attention.html").exists()
    assert not [tag for tag in event_records(run_dir / "tensorboard") if tag.startswith(("attention", "head_view"))]
    with pytest.raises(UserError, match="holds a model without attention layers \\(a bag of n-grams alone"):
        load_run(run_dir, needs_attention=True)


def bag_inputs(ids, counts=None):
    """A bag's input from hand-made feature ids (0 is padding), each seen once unless counts say."""
    ids = np.asarray(ids, "int32")
    counts = (ids > 0).astype("int32") if counts is None else np.asarray(counts, "int32")
    return {"ngrams": np.stack([ids, counts], axis=-1)}


BAG_INPUT = dict(input_shape=(2, 4, 2), input_dtype="int32")  # the harness's random ids and counts: 0 to 2


class NgramLayerChecks(TestCase):
    def test_bag_of_ngrams(self):
        from mha_project.extras.ngrams.layers import BagOfNgrams

        self.run_layer_test(
            BagOfNgrams,
            init_kwargs=dict(num_classes=3, features=32, dim=4),
            **BAG_INPUT,
            expected_output_shape=(2, 3),
            expected_output_dtype="float32",  # logits added to the encoder's in float32
            expected_num_trainable_weights=3,  # n-gram embedding, the logits' kernel and bias
            run_training_check=False,  # integer ids: the harness's training check feeds floats
        )

    def test_naive_bayes_ngrams(self):
        from mha_project.extras.ngrams.layers import NaiveBayesNgrams

        self.run_layer_test(
            NaiveBayesNgrams,
            init_kwargs=dict(num_classes=3, features=32, c=2.0),
            **BAG_INPUT,
            expected_output_shape=(2, 3),
            expected_output_dtype="float32",
            expected_num_trainable_weights=2,  # the linear layer's kernel and bias
            expected_num_non_trainable_weights=3,  # the kept n-grams, their ratios, the training texts' count
            expected_num_losses=1,  # the kernel's L2 penalty
            run_training_check=False,
        )

    def test_tfidf_ngrams(self):
        from mha_project.extras.ngrams.layers import TfidfNgrams

        self.run_layer_test(
            TfidfNgrams,
            init_kwargs=dict(num_classes=3, features=32, max_n=3, c=2.0),
            **BAG_INPUT,
            expected_output_shape=(2, 3),
            expected_output_dtype="float32",
            expected_num_trainable_weights=2,
            expected_num_non_trainable_weights=3,  # the kept n-grams, their idf, the training texts' count
            expected_num_losses=1,
            run_training_check=False,
        )


def test_wide_and_deep_classifier_rebuilds_from_its_config():
    # A functional model of three inputs: Keras's layer harness cannot build it, so its checks by hand.
    from mha_project.extras.ngrams.classifier import WideAndDeepClassifier
    from mha_project.extras.ngrams.layers import BagOfNgrams

    shape = dict(vocab_size=20, max_len=8, embed_dim=4, num_layers=1, num_heads=2, key_dim=4, ff_dim=8)
    model = WideAndDeepClassifier(EncoderBackbone(**shape), 3, ngram_branch=BagOfNgrams(3, features=32, dim=4))
    assert len(model.trainable_weights) == 4 + 16 + 2 + 3  # backbone, encoder logits, the bag's three
    inputs = {"token_ids": np.array([[3, 4, 5, 0], [6, 7, 0, 0]], "int32"), **model.text_inputs(TEXTS[:2])}
    rebuilt = WideAndDeepClassifier.from_config(model.get_config())
    rebuilt.set_weights(model.get_weights())
    np.testing.assert_allclose(np.asarray(rebuilt(inputs)), np.asarray(model(inputs)), atol=1e-6)
    assert tuple(model(inputs).shape) == (2, 3)


def python_ngrams(text: str, max_n: int = 2) -> list[str]:
    """The n-grams of a text as the bag defines them, in plain Python: scikit-learn's default token pattern."""
    import re

    words = re.findall(r"(?u)\b\w\w+\b", text.lower())
    return [" ".join(words[i : i + n]) for n in range(1, max_n + 1) for i in range(len(words) - n + 1)]


def hashed(gram: str) -> int:
    return int(tf.strings.to_hash_bucket_fast(gram, NGRAM_IDS - 1)) + 1  # 0 is left for padding


@pytest.mark.parametrize("max_n", [1, 2, 3])
def test_the_bag_reads_each_distinct_ngram_of_the_raw_text_with_its_count(max_n):
    from collections import Counter

    texts = ["The cat saw the cat. The cat!", "Don't stop, don't: a U.S. café", "", "one", "a"]
    out = ngram_inputs(tf.constant(texts), max_n)
    for row, text in enumerate(texts):
        expected = Counter()
        for gram, count in Counter(python_ngrams(text, max_n)).items():
            expected[hashed(gram)] += count
        ids, counts = out["ngrams"].numpy()[row, :, 0], out["ngrams"].numpy()[row, :, 1]
        assert {int(i): float(c) for i, c in zip(ids, counts) if c > 0} == dict(expected), text
        assert (ids[counts == 0] == 0).all()  # the rest is padding


@pytest.mark.slow
def test_the_bag_reads_the_whole_text_past_seq_len_and_outside_the_vocabulary():
    from hydra.utils import instantiate

    from mha_project.data.pipeline import TextPreprocessor
    from mha_project.data.vocabulary import make_vectorizer

    cfg = compose_cfg("debug=tiny", "model=wide_deep", "model/ngram_branch=mean", "seq_len=8")
    model = build_model(cfg, vocab_size=10, num_classes=2)
    vectorizer = make_vectorizer(["good tea good"], vocab_size=10)  # "zymurgy" is no word of it
    words = TextPreprocessor(vectorizer, 8)
    text = "good tea " * 20 + "zymurgy"
    data = instantiate(cfg.data)
    batches = data.pipeline([text], [1], words, 4, 0, shuffle=False, text_inputs=model.text_inputs)
    ((inputs, label),) = batches.as_numpy_iterator()
    assert inputs["token_ids"].shape == (1, 8) and int(label[0]) == 1  # the encoder reads 8 ids
    counts = dict(inputs["ngrams"][0].tolist())
    assert counts[hashed("tea zymurgy")] == 1  # the bag: the text's last bigram
    assert counts[hashed("good")] == 20 and counts[hashed("zymurgy")] == 1


def test_bag_of_ngrams_is_the_count_weighted_mean_of_its_ngram_rows():
    from mha_project.extras.ngrams.layers import BagOfNgrams

    bag = BagOfNgrams(num_classes=2, features=16, dim=3)
    inputs = bag_inputs([[3, 4, 5, 0], [3, 4, 5, 0], [0, 0, 0, 0]], [[2, 1, 1, 0], [2, 1, 1, 0], [0, 0, 0, 0]])
    out = np.asarray(bag(inputs["ngrams"]))
    rows = np.asarray(bag.embedding.embeddings)
    kernel, bias = (np.asarray(w) for w in bag.output_dense.weights)
    np.testing.assert_allclose(out[0], (2 * rows[3] + rows[4] + rows[5]) / 4 @ kernel + bias, atol=1e-5)
    np.testing.assert_allclose(out[1], out[0], atol=1e-6)  # same text, same logits
    np.testing.assert_allclose(out[2], bias, atol=1e-6)  # no n-grams: the bias alone, not NaN
    padded = {k: np.pad(v[:1], ((0, 0), (0, 4), (0, 0))) for k, v in inputs.items()}
    np.testing.assert_allclose(np.asarray(bag(padded["ngrams"])), out[:1], atol=1e-6)  # more padding changes nothing


def test_naive_bayes_ratios_are_nb_lrs_over_the_training_texts_own_ngrams():
    from sklearn.feature_extraction.text import CountVectorizer

    from mha_project.extras.ngrams.layers import NaiveBayesNgrams

    texts = ["great tea, great price", "stale tea", "great coffee", "bitter stale coffee"]
    labels = np.array([1, 0, 1, 0])
    ngrams = ngram_inputs(tf.constant(texts))["ngrams"].numpy()
    nb = NaiveBayesNgrams(num_classes=2, features=64, c=0.5, smoothing=1.0)
    nb.adapt([({"ngrams": ngrams[:2]}, labels[:2]), ({"ngrams": ngrams[2:]}, labels[2:])])

    # NB-LR's features as benchmarks/anchors.py makes them: each distinct word and bigram, binary.
    vectorizer = CountVectorizer(ngram_range=(1, 2), binary=True)
    x = vectorizer.fit_transform(texts).toarray()
    p = 1 + x[labels == 1].sum(0)  # Wang & Manning's p and q, alpha = 1
    q = 1 + x[labels == 0].sum(0)
    r = np.log((p / p.sum()) / (q / q.sum()))
    grams = vectorizer.get_feature_names_out()
    features = np.asarray(nb.feature_of(np.array([hashed(g) for g in grams], "int32")))
    assert len(set(features.tolist())) == len(grams) and 0 not in features  # each n-gram a feature of its own
    ratios = np.asarray(nb.ratios)
    np.testing.assert_allclose(ratios[features, 1], r, rtol=1e-5)
    np.testing.assert_allclose(ratios[features, 0], -r, rtol=1e-5)  # two classes: one-vs-rest mirrors
    assert not ratios[0].any() and int(nb.feature_of(np.array([hashed("cheap")], "int32"))[0]) == 0  # unseen

    kernel = np.random.default_rng(0).normal(size=(64, 2))
    nb.kernel.assign(kernel)
    nb.bias.assign([0.5, -0.5])
    # scikit-learn's objective, C * (sum of the 4 losses) + |kernel|^2 / 2, divided by 4 C: a mean loss's penalty.
    assert float(sum(nb.losses)) == pytest.approx((kernel**2).sum() / (2 * nb.c * 4), rel=1e-5)
    logits = np.asarray(nb(ngrams))
    np.testing.assert_allclose(logits[:, 1], x @ (r * kernel[features, 1]) - 0.5, rtol=1e-5)
    padded = np.pad(ngrams, ((0, 0), (0, 3), (0, 0)))
    np.testing.assert_allclose(np.asarray(nb(padded)), logits, atol=1e-6)


def test_a_linear_bag_keeps_the_ngrams_held_by_the_most_training_texts():
    from mha_project.extras.ngrams.layers import NaiveBayesNgrams

    texts = ["great tea", "great tea now", "stale tea", "bitter coffee"]  # "tea" in 3 texts, then 2, then 1
    nb = NaiveBayesNgrams(num_classes=2, features=4)  # feature 0 and three kept n-grams
    nb.adapt([(ngram_inputs(tf.constant(texts)), np.array([1, 1, 0, 0]))])
    features = {g: int(nb.feature_of(np.array([hashed(g)], "int32"))[0]) for g in ("tea", "great", "great tea")}
    assert sorted(features.values()) == [1, 2, 3]  # the three held by two texts or more
    for rare in ("now", "stale", "tea now", "bitter coffee"):
        assert int(nb.feature_of(np.array([hashed(rare)], "int32"))[0]) == 0


def test_tfidf_features_are_scikit_learns_sublinear_tfidf():
    from sklearn.feature_extraction.text import TfidfTransformer

    from mha_project.extras.ngrams.layers import TfidfNgrams

    inputs = bag_inputs([[11, 12, 0], [12, 13, 15], [0, 0, 0]], [[3, 1, 0], [1, 2, 1], [0, 0, 0]])
    tfidf = TfidfNgrams(num_classes=2, features=6)
    tfidf.adapt([(inputs, np.array([0, 1, 1]))])
    kept = [11, 12, 13, 15]  # the n-gram ids seen, ascending: features 1 to 4
    np.testing.assert_array_equal(np.asarray(tfidf.feature_of(np.array(kept + [14], "int32"))), [1, 2, 3, 4, 0])
    counts = np.zeros((3, len(kept)))
    for row in range(3):
        for f, c in inputs["ngrams"][row]:
            if c:
                counts[row, kept.index(f)] += c
    reference = TfidfTransformer(sublinear_tf=True).fit(counts)
    np.testing.assert_allclose(np.asarray(tfidf.scale)[1:5], reference.idf_, rtol=1e-5)
    kernel = np.random.default_rng(0).normal(size=(6, 2))
    tfidf.kernel.assign(kernel)
    expected = reference.transform(counts).toarray() @ kernel[1:5]
    np.testing.assert_allclose(np.asarray(tfidf(inputs["ngrams"])), expected, atol=1e-5)  # no words: zeros, not NaN


def test_naive_bayes_ratios_are_one_vs_rest_for_more_classes():
    from mha_project.extras.ngrams.layers import NaiveBayesNgrams

    nb = NaiveBayesNgrams(num_classes=3, features=5)
    nb.adapt([(bag_inputs([[1, 0], [2, 0], [3, 0]]), np.array([0, 1, 2]))])
    ratios = np.asarray(nb.ratios)
    # Word i + 1 is held by class i's text alone: its ratio is positive for that class, negative for the rest.
    for word, own in ((1, 0), (2, 1), (3, 2)):
        assert ratios[word, own] > 0 and (np.delete(ratios[word], own) < 0).all()


@pytest.mark.parametrize(
    "branch, weighting", [("bigram", "mean"), ("bigram_alone", "mean"), ("bigram", "nb"), ("bigram_alone", "tfidf")]
)
@pytest.mark.slow
def test_the_ngram_branch_classifier_saves_and_loads(tmp_path, branch, weighting):
    bag = [f"model/ngram_branch={weighting}", "model.ngram_branch.features=64"]
    model = small_model(50, 2, *BRANCH[branch], *bag, *(["model.ngram_branch.dim=4"] if weighting == "mean" else []))
    assert (encoder_blocks(model) != []) == (branch == "bigram")
    inputs = {"token_ids": np.array([[3, 4, 5, 0], [6, 7, 8, 9]], "int32"), **model.text_inputs(TEXTS[:2])}
    if weighting != "mean":  # feature weights and a kernel away from their initial values: the file holds both
        model.ngram_branch.adapt([(inputs, np.array([0, 1]))])
        model.ngram_branch.kernel.assign(np.random.default_rng(0).normal(size=model.ngram_branch.kernel.shape))
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    np.testing.assert_allclose(np.asarray(loaded(inputs)), np.asarray(model(inputs)), atol=1e-6)
    assert np.asarray(model(inputs)).sum(1) == pytest.approx([1, 1], abs=1e-5)
    assert loaded.ngram_branch.max_n == model.ngram_branch.max_n == 2


def test_an_ngram_table_larger_than_memory_is_refused_up_front():
    from mha_project.config import validate_config
    from mha_project.errors import ConfigError

    with pytest.raises(ConfigError, match="model.ngram_branch.features=1099511627776 is invalid here: its table"):
        validate_config(compose_cfg("model=wide_deep", "model.ngram_branch.features=1099511627776"))
    validate_config(compose_cfg("model=wide_deep", "model/ngram_branch=mean"))  # the default table fits


def test_a_learning_rate_for_an_absent_bag_is_one_line_before_anything_is_made(tmp_path):
    run_dir = tmp_path / "run"
    result = run_script("train.py", "optimizer=wide_deep", "optimizer.ngram_lr=0.01", f"hydra.run.dir={run_dir}")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "optimizer.ngram_lr=0.01 is invalid with a model without a bag of n-grams" in result.stderr
    assert not run_dir.exists()


def test_an_objective_and_a_loss_that_disagree_are_refused_in_one_line():
    from mha_project.config import validate_config
    from mha_project.errors import ConfigError

    for overrides in (["model.objective=one_vs_rest"], ["loss=one_vs_rest"]):
        with pytest.raises(ConfigError, match="a sigmoid per class trains with loss=one_vs_rest"):
            validate_config(compose_cfg("model=wide_deep", *overrides))
    validate_config(compose_cfg("model=wide_deep", "model.objective=one_vs_rest", "loss=one_vs_rest"))
    with pytest.raises(ConfigError, match="model.objective=ovr is invalid: must be one of softmax, one_vs_rest"):
        validate_config(compose_cfg("model=wide_deep", "model.objective=ovr"))


def test_the_one_vs_rest_loss_is_k_binary_logistic_losses_summed():
    from mha_project.extras.ngrams.classifier import OneVsRestCrossentropy

    rng = np.random.default_rng(0)
    logits, labels = rng.normal(size=(6, 4)), rng.integers(0, 4, size=6)
    scores = 1 / (1 + np.exp(-logits))
    is_class = np.eye(4)[labels]
    # Class k's own binary problem: "is it k?", its logistic loss on that text; summed over k, mean over texts.
    expected = -(is_class * np.log(scores) + (1 - is_class) * np.log(1 - scores)).sum(axis=1).mean()
    assert float(OneVsRestCrossentropy()(labels, scores.astype("float32"))) == pytest.approx(expected, rel=1e-5)


@pytest.mark.slow
def test_a_one_vs_rest_classifier_scores_each_class_and_trains_with_its_loss(tmp_path):
    from mha_project.extras.ngrams.classifier import OneVsRestCrossentropy

    overrides = ["model=wide_deep", "model.ngram_branch.features=64", "model.objective=one_vs_rest", "loss=one_vs_rest"]
    model = small_model(50, 3, *overrides)
    inputs = {"token_ids": np.array([[3, 4, 5, 0], [6, 7, 8, 9]], "int32"), **model.text_inputs(TEXTS[:2])}
    model.ngram_branch.adapt([(inputs, np.array([0, 2]))])
    model.ngram_branch.kernel.assign(np.random.default_rng(0).normal(size=model.ngram_branch.kernel.shape))
    scores = np.asarray(model(inputs))
    assert ((scores > 0) & (scores < 1)).all() and not np.allclose(scores.sum(1), 1, atol=1e-3)  # a sigmoid each
    compile_model(model, compose_cfg("debug=tiny", *overrides), total_steps=10)
    assert isinstance(model.loss, OneVsRestCrossentropy)
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    assert loaded.objective == "one_vs_rest"
    np.testing.assert_allclose(np.asarray(loaded(inputs)), scores, atol=1e-6)


@pytest.mark.slow
def test_a_one_vs_rest_bag_on_three_classes_is_evaluated_again_with_the_loss_it_trained_with(tmp_path):
    from mha_project.extras.analysis.evaluate import evaluate_run

    data = write_folder_dataset(tmp_path / "data", classes=("neg", "pos", "mid"), per_class=40, extra_train=())
    cfg = compose_cfg(
        "debug=tiny", *QUIET, "data=folder", f"data.path={data}", "model=wide_deep", "model.backbone=null",
        "model/ngram_branch=nb", "model.objective=one_vs_rest", "loss=one_vs_rest", "model.ngram_branch.features=4096",
    )  # fmt: skip
    metrics = train(cfg, tmp_path / "run")
    again = evaluate_run(tmp_path / "run")
    assert again["test_loss"] == pytest.approx(metrics["test_loss"], rel=1e-5)
    assert again["test_accuracy"] == metrics["test_accuracy"] > 0.5  # three classes: chance is 1/3
    # The softmax's cross-entropy of the same scores would be another number: the recorded loss is the OvR one.
    run = load_run(tmp_path / "run")
    assert run.model.objective == "one_vs_rest" and metrics["hparams"]["objective"] == "one_vs_rest"


@pytest.mark.slow
def test_more_than_two_classes_get_the_long_fit_recorded_as_the_run_trained_it(tmp_path):
    import yaml

    from conftest import logged
    from mha_project.training.train import follow_the_data

    data = write_folder_dataset(tmp_path / "data", classes=("neg", "pos", "mid"), per_class=20, extra_train=())
    overrides = ["experiment=wide_deep", "debug=tiny", *QUIET, "data=folder", f"data.path={data}",
                 "model/backbone=none", "model.ngram_branch.features=1024", "model.ngram_branch.c=auto",
                 "trainer.schedule_from_data.many_classes.epochs=3",
                 "trainer.schedule_from_data.many_classes.choice_epochs=1",
                 "trainer.warmup_fraction=0"]  # fmt: skip
    with logged("mha_project.training.train") as messages:
        metrics = train(compose_cfg(*overrides), tmp_path / "run")
    # debug=tiny's 1 epoch, the experiment's patience, monitor, bag rate and C grid's length give way to the long fit's
    long_fit = {"epochs": 3, "trainer.early_stopping_patience": 4, "trainer.monitor": "val_loss",
                "optimizer.ngram_lr": 0.01, "model.choice_epochs": 1}  # fmt: skip
    assert metrics["schedule"] == {
        "why": "3 classes (trainer.schedule_from_data.many_classes.min_classes=3)",
        "set": long_fit,
    }
    assert json.loads((tmp_path / "run" / "run.json").read_text())["results"]["schedule"] == metrics["schedule"]
    assert [m for m in messages if m.startswith("schedule from the data")] == [
        "schedule from the data: 3 classes (trainer.schedule_from_data.many_classes.min_classes=3): epochs=3 "
        "trainer.early_stopping_patience=4 trainer.monitor=val_loss optimizer.ngram_lr=0.01 model.choice_epochs=1 "
        "(trainer.schedule_from_data=null keeps the config's own)"
    ]
    assert metrics["chosen"]["ngram_c"]["epochs"] == 1  # the C grid trained as long as the long fit asks
    epochs = len((tmp_path / "run" / "history.csv").read_text().splitlines()) - 1
    assert epochs == 3 and metrics["monitor"] == "val_loss" and metrics["hparams"]["epochs"] == 3
    saved = yaml.safe_load((tmp_path / "run" / ".hydra" / "config.yaml").read_text())  # the record: what trained
    assert (saved["trainer"]["epochs"], saved["trainer"]["monitor"], saved["optimizer"]["ngram_lr"],
            saved["model"]["choice_epochs"]) == (3, "val_loss", 0.01, 1)  # fmt: skip
    # Two classes keep the config's own fit; so does a run that turns the rule off.
    two = load_splits(compose_cfg("data=folder", f"data.path={write_folder_dataset(tmp_path / 'two')}").data, 1)
    cfg = compose_cfg(*overrides)
    assert follow_the_data(cfg, two, record=None) is cfg
    off = compose_cfg(*overrides, "trainer.schedule_from_data=null")
    three = load_splits(off.data, 1)
    assert three.num_classes == 3 and follow_the_data(off, three, record=None) is off


def test_two_classes_of_long_texts_get_trigrams_and_their_last_tokens_and_short_ones_keep_the_config(tmp_path):
    from types import SimpleNamespace

    from mha_project.config import build, validate_config
    from mha_project.errors import ConfigError
    from mha_project.training.train import follow_the_data

    def folder(name, words):
        root = write_folder_dataset(tmp_path / name, per_class=6, extra_train=())
        for text in root.glob("*/*/*.txt"):  # each text `words` words long, its class's words first
            text.write_text(" ".join((text.read_text().split() * words)[:words]))
        return root

    recorded = []
    record = SimpleNamespace(stage="started", finish_stage=lambda stage, **results: recorded.append(results))
    overrides = ["experiment=wide_deep", "trainer.schedule_from_data.long_texts.min_median_words=128"]
    long_cfg = compose_cfg(*overrides, "data=folder", f"data.path={folder('long', 128)}")
    decided = follow_the_data(long_cfg, load_splits(long_cfg.data, 1), record)
    long_texts = {"model.ngram_branch.max_n": 3, "model.ngram_branch.features": 4194304, "seq_len": 400,
                  "data.truncation": "tail", "epochs": 1, "trainer.validations_per_epoch": 4,
                  "trainer.warmup_fraction": 0.05, "trainer.early_stopping_patience": 2}  # fmt: skip
    why = "a median of 128 words in the first 1000 training texts (trainer.schedule_from_data.long_texts." + (
        "min_median_words=128)"
    )
    assert recorded == [{"schedule": {"why": why, "set": long_texts}}]
    assert (decided.model.ngram_branch.max_n, decided.model.backbone.max_len, decided.trainer.epochs) == (3, 400, 1)
    data = build(decided.data)  # what train builds again after the rule: the encoder reads the last 400 tokens
    assert (data.seq_len, data.truncation) == (400, "tail")
    assert (long_cfg.seq_len, long_cfg.data.truncation) == (128, "head")  # the composed config is left as it was
    # One word fewer than the rule's median: the config's own fit.
    short_cfg = compose_cfg(*overrides, "data=folder", f"data.path={folder('short', 127)}")
    assert follow_the_data(short_cfg, load_splits(short_cfg.data, 1), record) is short_cfg and len(recorded) == 1
    with pytest.raises(ConfigError) as refused:
        validate_config(compose_cfg("experiment=wide_deep", "trainer.schedule_from_data.long_texts.truncation=middle"))
    assert str(refused.value) == (
        "trainer.schedule_from_data.long_texts.truncation=middle is invalid: must be one of head, tail, head_tail"
    )


def test_a_run_records_its_ngram_options_as_hyper_parameters():
    from mha_project.config import hparams_of

    recorded = hparams_of(compose_cfg("model=wide_deep", "optimizer=wide_deep", "optimizer.ngram_lr=0.02"))
    assert recorded["ngram_branch"] == "NaiveBayesNgrams" and recorded["optimizer.ngram_lr"] == 0.02
    keys = {"ngram_branch.features", "ngram_branch.max_n", "ngram_branch.c", "encoder_logit_dropout", "objective"}
    assert keys <= set(recorded) and "ngram_branch._partial_" not in recorded


def test_choosing_the_fit_on_validation_pairs_runs_by_seed_and_keeps_the_first_of_a_tie():
    from benchmarks.choose_by_validation import choose

    def run(fit, seed, val, test):
        return {"setting": ("table", "x.csv", "label", "bigram"), "fit": fit, "seed": seed, "best_val_accuracy": val,
                "test_accuracy": test}  # fmt: skip

    gentle, long = (0.003, 8, 3, 0.14), (0.01, 12, 4, 0.2)
    runs = [run(gentle, 1, 0.80, 0.81), run(long, 1, 0.82, 0.79), run(gentle, 2, 0.85, 0.90), run(long, 2, 0.85, 0.70)]
    runs.append(run(long, 3, 0.99, 0.99))  # a seed only one fit ran: not compared
    (row,) = choose(runs)
    assert row["seeds"] == [1, 2] and row["fits"] == {gentle: pytest.approx(0.855), long: pytest.approx(0.745)}
    assert row["chosen"] == pytest.approx((0.79 + 0.90) / 2) and row["right"] == 1  # seed 1 chose wrong


@pytest.mark.slow
def test_an_auto_c_is_chosen_on_validation_recorded_and_read_back_rather_than_chosen_again(tmp_path, monkeypatch):
    from mha_project.extras.ngrams import classifier

    overrides = ("debug=tiny", "model=wide_deep", "model.ngram_branch.features=512", "model.ngram_branch.c=auto",
                 "model.choice_epochs=1")  # fmt: skip
    run_dir = tmp_path / "run"
    metrics = train(compose_cfg(*overrides), run_dir)
    chosen = metrics["chosen"]["ngram_c"]
    assert chosen["grid"] == list(classifier.C_GRID) and len(chosen["val_loss"]) == len(chosen["val_accuracy"]) == 7
    assert chosen["epochs"] == 1  # model.choice_epochs: how long each C's bag trained alone
    assert chosen["c"] == chosen["grid"][int(np.argmin(chosen["val_loss"]))]  # the first of the best
    assert load_run(run_dir).model.get_layer("ngram_branch").c == chosen["c"]  # model.keras holds the C it trained
    # TensorBoard: the C chosen and each C's validation loss and accuracy, one scalar each
    from conftest import scalar_events

    scalars = {tag: value for tag, [(_, value)] in scalar_events(run_dir / "tensorboard", "chosen/").items()}
    assert scalars.pop("chosen/ngram_c") == pytest.approx(chosen["c"])
    assert scalars == {
        f"chosen/ngram_c/{metric}/c={c:g}": pytest.approx(score)
        for metric in ("val_loss", "val_accuracy")
        for c, score in zip(chosen["grid"], chosen[metric])
    }
    # A resumed run hands adapt what run.json recorded: the bag takes that C and nothing is fitted again.
    monkeypatch.setattr(classifier, "choose_c", lambda *args: pytest.fail("chose again"))
    cfg = compose_cfg(*overrides)
    run = load_run(run_dir)
    model = build_model(cfg, run.preprocessor.vectorizer.vocabulary_size(), 2)
    splits = run.splits()
    batches = run.batches(splits.train_texts, splits.train_labels)
    again = model.adapt(batches, None, {"ngram_c": {**chosen, "c": 3.1623}})
    assert model.ngram_branch.c == 3.1623 and again["ngram_c"]["c"] == 3.1623


def _words_dataset(rng, labels, pool: int, words: int, swapped: bool):
    """``(ngrams, label)`` batches of texts made of ``words`` words drawn from their class's own ``pool`` rare
    words (each held by a few texts), plus two of 20 words every class shares; ``swapped``: each text draws from
    the other class's pool."""
    texts = [
        " ".join([f"c{y ^ swapped}w{w}" for w in rng.choice(pool, words)] + [f"s{w}" for w in rng.choice(20, 2)])
        for y in labels
    ]
    inputs = ngram_inputs(tf.constant(texts), max_n=1)
    return tf.data.Dataset.from_tensor_slices((inputs, np.asarray(labels, "int32"))).batch(32)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["strong", "weak"])
def test_an_auto_c_picks_the_strong_penalty_where_the_words_mislead_and_a_weak_one_where_rare_words_tell(case):
    from mha_project.extras.ngrams.classifier import choose_c
    from mha_project.extras.ngrams.layers import NaiveBayesNgrams

    # 600 training and 400 validation texts, 30 % of class 1. "strong": validation texts hold the other class's
    # words, so the less the bag learns of them the better (the strongest penalty, C = 0.01, is right).
    # "weak": the label lies only in rare words (3 of 400 per class, each in about 1.5 texts), which a strong
    # penalty keeps from outweighing the majority's bias: the larger C the better (the grid's weak half is right).
    rng = np.random.default_rng(0)
    train_labels, val_labels = (rng.random(600) < 0.3).astype(int), (rng.random(400) < 0.3).astype(int)
    pool, words = (150, 4) if case == "strong" else (400, 3)
    train_ds = _words_dataset(rng, train_labels, pool, words, swapped=False)
    val_ds = _words_dataset(rng, val_labels, pool, words, swapped=case == "strong")
    bag = NaiveBayesNgrams(num_classes=2, features=4096, max_n=1, c="auto")
    bag.adapt(train_ds.as_numpy_iterator())
    chosen = choose_c(bag, train_ds, val_ds, "softmax", epochs=2)
    losses, scores = chosen["val_loss"], chosen["val_accuracy"]
    assert chosen["c"] == chosen["grid"][int(np.argmin(losses))]  # the grid's best (ties: the stronger penalty)
    majority = float(np.mean(val_labels == 0))
    if case == "strong":
        assert chosen["c"] == min(chosen["grid"]) and losses[0] < min(losses[1:]), losses
    else:
        at = chosen["grid"].index(chosen["c"])
        assert chosen["c"] > 0.3 and scores[at] > scores[0] + 0.05 and scores[0] <= majority + 0.02, (losses, scores)


@pytest.mark.slow
def test_the_grid_on_other_batches_trains_on_those_and_on_the_same_batches_again_matches_the_runs():
    from mha_project.extras.ngrams.classifier import choose_c
    from mha_project.extras.ngrams.layers import NaiveBayesNgrams

    rng = np.random.default_rng(0)
    train_ds = _words_dataset(rng, (rng.random(320) < 0.3).astype(int), 400, 3, swapped=False)
    val_ds = _words_dataset(rng, (rng.random(160) < 0.3).astype(int), 400, 3, swapped=False)
    bag = NaiveBayesNgrams(num_classes=2, features=4096, max_n=1, c="auto")
    bag.adapt(train_ds.as_numpy_iterator())
    runs, same, whole = (choose_c(bag, train_ds, val_ds, "softmax", 1, batch_size=b) for b in (None, 32, 320))
    np.testing.assert_allclose(same["val_loss"], runs["val_loss"], rtol=1e-5)  # the run's batches, re-padded
    assert np.abs(np.subtract(whole["val_loss"], runs["val_loss"])).max() > 1e-3  # one step an epoch, not ten


def test_a_bag_cut_to_its_kept_ngrams_computes_what_the_whole_table_does():
    from mha_project.extras.ngrams.layers import NaiveBayesNgrams, TfidfNgrams

    texts = tf.constant(["great tea great price", "stale tea", "never again", "great value, fresh"])
    inputs = ngram_inputs(texts)
    for kind in (NaiveBayesNgrams, TfidfNgrams):
        whole = kind(num_classes=2, features=4096)
        whole.adapt([(inputs, np.array([1, 0, 0, 1]))])
        whole.kernel.assign(np.random.default_rng(0).normal(size=whole.kernel.shape))
        cut = whole.cut_to_kept()
        assert type(cut) is kind and 2 < cut.features < 4096  # a few n-grams, most of the table unused
        assert not np.any(cut.kernel.numpy())  # the kernel from zero; given the whole one's rows, it computes the same
        cut.kernel.assign(whole.kernel[: cut.features])
        unseen = ngram_inputs(tf.constant(["great tea, never stale", "words it never saw"]))["ngrams"]
        np.testing.assert_allclose(cut(unseen), whole(unseen), rtol=1e-6)


def test_a_c_that_is_neither_a_positive_number_nor_auto_is_refused_in_one_line():
    from mha_project.config import validate_config
    from mha_project.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^model.ngram_branch.c=often is invalid: must be a number > 0, or auto"):
        validate_config(compose_cfg("model=wide_deep", "model.ngram_branch.c=often"))
    validate_config(compose_cfg("model=wide_deep", "model.ngram_branch.c=auto"))


def test_an_auto_objective_is_a_softmax_for_two_classes_and_one_vs_rest_for_more_with_the_loss_to_match():
    from mha_project.config import validate_config
    from mha_project.errors import ConfigError
    from mha_project.extras.ngrams.classifier import ObjectiveCrossentropy, OneVsRestCrossentropy

    overrides = ("debug=tiny", "model=wide_deep", "model.ngram_branch.features=64", "model.objective=auto")
    for classes, activation in ((2, "softmax"), (3, "sigmoid")):
        model = build_model(compose_cfg(*overrides, "loss=objective"), 30, classes)
        assert model.get_layer("probabilities").activation.__name__ == activation
    y, two, three = np.array([1, 0]), np.array([[0.3, 0.7], [0.6, 0.4]]), np.array([[0.2, 0.7, 0.4], [0.5, 0.1, 0.3]])
    expected = keras.losses.SparseCategoricalCrossentropy()(y, two)
    np.testing.assert_allclose(ObjectiveCrossentropy()(y, two), expected, rtol=1e-6)
    np.testing.assert_allclose(ObjectiveCrossentropy()(y, three), OneVsRestCrossentropy()(y, three), rtol=1e-6)
    with pytest.raises(ConfigError, match=r"^model.objective=auto is invalid with loss=keras.losses"):
        validate_config(compose_cfg("model=wide_deep", "model.objective=auto"))
    with pytest.raises(ConfigError, match=r"^model.objective=softmax is invalid with loss=mha_project"):
        validate_config(compose_cfg("model=wide_deep", "loss=objective"))
    validate_config(compose_cfg("experiment=wide_deep"))  # the experiment's own pair
