"""Self-pretraining (mha_project/extras/pretraining): BERT masking, the masked LM, the stage inside a run."""

import csv
import json
import subprocess
import sys

import numpy as np
import pytest
from keras.src.testing import TestCase  # Keras's own layer test harness (not public API)

from conftest import QUIET, TINY, compose_cfg, run_script, run_sweep, write_folder_dataset
from mha_project.errors import ConfigError, UserError

MASK_ID = 999


def random_batch(rows=512, width=128, seed=0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, width + 1, size=rows)
    ids = np.zeros((rows, width), "int32")
    for i, n in enumerate(lengths):
        ids[i, :n] = rng.integers(2, MASK_ID, size=n)
    return ids, lengths


def masked(ids, seed=(1, 2), rate=0.15):
    from mha_project.extras.pretraining.masking import mask_batch

    return [np.asarray(t) for t in mask_batch(ids, np.asarray(seed, "int64"), rate, MASK_ID)]


def test_masking_rate_positions_and_the_80_10_10_split():
    ids, lengths = random_batch()
    new, positions, targets, weights = masked(ids)
    chosen = weights > 0
    rows = np.broadcast_to(np.arange(len(ids))[:, None], positions.shape)

    # The rate: round(0.15 * length) per text (at least one), so 15% of all real tokens within rounding.
    assert abs(chosen.sum() / lengths.sum() - 0.15) < 0.005
    assert np.array_equal(chosen.sum(axis=1), np.maximum(1, np.round(lengths * 0.15)))
    # Never padding; distinct positions per text.
    assert (ids[rows[chosen], positions[chosen]] != 0).all()
    assert all(len(set(p[w])) == w.sum() for p, w in zip(positions, chosen))
    # Labels only at the chosen positions, and they are the original tokens.
    assert np.array_equal(targets[chosen], ids[rows[chosen], positions[chosen]])
    assert (targets[~chosen] == 0).all()
    # Everything not chosen is unchanged.
    untouched = np.ones_like(ids, bool)
    untouched[rows[chosen], positions[chosen]] = False
    assert np.array_equal(new[untouched], ids[untouched])
    # 80% [MASK], 10% another word, 10% the same word (n ~ 9,000 positions: +-2% is > 6 sigma).
    after = new[rows[chosen], positions[chosen]]
    before = targets[chosen]
    assert abs((after == MASK_ID).mean() - 0.8) < 0.02
    assert abs(((after != MASK_ID) & (after != before)).mean() - 0.1) < 0.02
    assert abs((after == before).mean() - 0.1) < 0.02
    assert ((after >= 2) & (after <= MASK_ID)).all()  # random words are words: never padding or [UNK]


def test_masking_is_seeded_and_other_rates_hold():
    ids, lengths = random_batch(seed=3)
    a, b, c = masked(ids, (5, 6)), masked(ids, (5, 6)), masked(ids, (7, 8))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[0], c[0])
    heavy = masked(ids, rate=0.4)[3]
    assert abs(heavy.sum() / lengths.sum() - 0.4) < 0.005


def test_an_empty_text_gets_no_masked_position():
    ids = np.array([[5, 6, 7, 0], [0, 0, 0, 0]], "int32")
    new, positions, targets, weights = masked(ids)
    assert weights[1].sum() == 0 and np.array_equal(new[1], ids[1])
    assert weights[0].sum() == 1


def test_new_masks_every_epoch():
    import tensorflow as tf

    from mha_project.extras.pretraining.masking import masked_lm_dataset

    ids, _ = random_batch(rows=64, width=32)
    batches = tf.data.Dataset.from_tensor_slices((ids, np.zeros(len(ids), "int32"))).batch(32)
    ds = masked_lm_dataset(batches, rate=0.15, mask_id=MASK_ID, seed=1)
    assert int(ds.cardinality()) == 2
    first = [x["mask_positions"].numpy() for x, _, _ in ds]
    second = [x["mask_positions"].numpy() for x, _, _ in ds]
    assert any(not np.array_equal(a, b) for a, b in zip(first, second))


def test_mask_token_takes_the_last_id_within_vocab_size():
    from mha_project.data.vocabulary import make_vectorizer
    from mha_project.extras.pretraining.masking import MASK_TOKEN, mask_id_of, with_mask_token

    vectorizer = make_vectorizer(["b a a c c c d d d d"], vocab_size=5)
    words = with_mask_token(vectorizer.get_vocabulary(include_special_tokens=False), 5)
    with_mask = make_vectorizer(None, 5, vocabulary=words)
    assert with_mask.vocabulary_size() == 5
    assert with_mask.get_vocabulary() == ["", "[UNK]", "d", "c", MASK_TOKEN]
    assert mask_id_of(with_mask) == 4
    # Text never produces [MASK]: the brackets are stripped.
    assert 4 not in with_mask(np.array(["[MASK] d"], dtype=object)).numpy()[0]


def small_backbone(**changes):
    from mha_project.model.backbone import EncoderBackbone

    arguments = dict(
        vocab_size=40, max_len=12, embed_dim=8, num_layers=2, num_heads=2, key_dim=4, ff_dim=16, attention_dropout=0.0
    )
    return EncoderBackbone(**{**arguments, **changes})


def small_lm(tie=True, cls=False, position_encoding="learned"):
    from mha_project.extras.pretraining.models import MaskedLanguageModel
    from mha_project.extras.rotary.attention import RotaryEncoderBackbone

    if position_encoding == "rotary":
        arguments = dict(vocab_size=40, max_len=12, embed_dim=8, num_layers=2, num_heads=2, key_dim=4, ff_dim=16)
        return MaskedLanguageModel(RotaryEncoderBackbone(**arguments, cls_token=cls), tie_embeddings=tie)
    return MaskedLanguageModel(small_backbone(cls_token=cls), tie_embeddings=tie)


@pytest.mark.slow
@pytest.mark.parametrize("tie, position_encoding", [(True, "learned"), (False, "learned"), (True, "rotary")])
def test_masked_language_model_round_trips_through_model_save(tmp_path, tie, position_encoding):
    import keras

    model = small_lm(tie=tie, position_encoding=position_encoding)
    inputs = {"token_ids": np.array([[3, 4, 5, 0, 0]], "int32"), "mask_positions": np.array([[1, 2]], "int32")}
    before = np.asarray(model(inputs))
    model.save(tmp_path / "mlm.keras")
    loaded = keras.saving.load_model(tmp_path / "mlm.keras", safe_mode=True)
    np.testing.assert_allclose(np.asarray(loaded(inputs)), before, rtol=1e-5, atol=1e-6)
    assert before.shape == (1, 2, 40)
    head = model.get_layer("mlm_head")
    assert hasattr(head, "output_dense") != tie  # tied: no (embed_dim, vocab) kernel of its own


def small_electra():
    from mha_project.extras.pretraining.models import ReplacedTokenDetector

    return ReplacedTokenDetector(small_backbone(embed_dim=16, num_layers=1, num_heads=4), generator_size=0.5)


def test_replace_with_samples_marks_exactly_the_changed_tokens():
    ids = np.array([[5, 6, 7, 8, 0], [9, 10, 0, 0, 0]], "int32")
    inputs = {
        "token_ids": np.array([[5, 3, 7, 3, 0], [3, 10, 0, 0, 0]], "int32"),  # 3 = [MASK]
        "mask_positions": np.array([[1, 3], [0, 1]], "int32"),
    }
    targets = np.array([[6, 8], [9, 0]], "int32")
    weights = np.array([[1.0, 1.0], [1.0, 0.0]], "float32")  # text 2: one chosen; position 1 is not masked
    sampled = np.array([[6, 20], [21, 22]], "int32")  # 6 is a correct guess; 22 must not be used
    from mha_project.extras.pretraining.models import replace_with_samples

    corrupted, replaced = (np.asarray(t) for t in replace_with_samples(inputs, targets, weights, sampled))
    assert corrupted.tolist() == [[5, 6, 7, 20, 0], [21, 10, 0, 0, 0]]
    assert replaced.tolist() == [[0, 0, 0, 1, 0], [1, 0, 0, 0, 0]]
    assert (corrupted[ids == 0] == 0).all()


@pytest.mark.slow
def test_electra_round_trips_and_fills_masks_with_its_generator(tmp_path):
    import keras

    from mha_project.extras.pretraining.models import ReplacedTokenDetector

    model = small_electra()
    inputs = {"token_ids": np.array([[3, 4, 5, 0]], "int32"), "mask_positions": np.array([[1]], "int32")}
    before = np.asarray(model(inputs))  # the first call builds it, as build_pretrainer does
    model.save(tmp_path / "electra.keras")
    loaded = keras.saving.load_model(tmp_path / "electra.keras", safe_mode=True)
    assert isinstance(loaded, ReplacedTokenDetector)
    np.testing.assert_allclose(np.asarray(loaded(inputs)), before, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        np.asarray(loaded.generator(inputs)), np.asarray(model.generator(inputs)), rtol=1e-5, atol=1e-6
    )
    assert model.generator.backbone.embedding.embed_dim == 8  # generator_size=0.5 of 16
    assert np.asarray(model(inputs)).shape == (1, 4)  # a "replaced" logit per token


@pytest.mark.slow
def test_electra_train_step_learns_to_detect_replacements():
    import keras
    import tensorflow as tf

    from mha_project.extras.pretraining.masking import masked_lm_dataset

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    # Texts of repeated pairs ("5 6 5 6 ..."): a replaced word is easy to spot from its neighbours.
    ids = np.tile(np.array([5, 6] * 6, "int32"), (64, 1)) + rng.integers(0, 2, (64, 1)).astype("int32") * 2
    batches = tf.data.Dataset.from_tensor_slices((ids, np.zeros(64, "int32"))).batch(16)
    ds = masked_lm_dataset(batches, rate=0.3, mask_id=39, seed=0)
    model = small_electra()
    model.compile(optimizer=keras.optimizers.Adam(0.01))
    history = model.fit(ds, epochs=8, verbose=0, shuffle=False).history
    assert history["replaced_loss"][-1] < 0.7 * history["replaced_loss"][0], history["replaced_loss"]
    assert history["masked_accuracy"][-1] > 0.4  # the generator learns the pairs too
    expected = history["masked_lm_loss"][-1] + 50 * history["replaced_loss"][-1]
    assert history["loss"][-1] == pytest.approx(expected, rel=1e-3)


def test_tied_head_reads_the_token_embedding():
    model = small_lm(tie=True)
    inputs = {"token_ids": np.array([[3, 4, 5]], "int32"), "mask_positions": np.array([[0]], "int32")}
    before = np.asarray(model(inputs))
    table = model.backbone.token_embedding.embeddings
    table.assign(table.numpy() * 2.0)
    assert not np.allclose(np.asarray(model(inputs)), before)


@pytest.mark.parametrize("position_encoding", ["learned", "rotary"])
def test_the_classifier_starts_from_the_pretrained_backbone(position_encoding):
    from mha_project.extras.pretraining.models import build_pretrainer
    from mha_project.extras.pretraining.stage import pretrained_backbone
    from mha_project.training.train import build_model

    cfg = compose_cfg(
        *TINY,
        "pretrain=mlm",
        "layers=2",
        "model.backbone.norm_first=true",
        *(["model/backbone=rotary"] if position_encoding == "rotary" else []),
        "pretrain.dropout=0.0",
        "dropout=0.3",
    )
    mlm = build_pretrainer(cfg.model.backbone, cfg.pretrain, 400)
    has_table = any("position_embedding" in w.path for w in mlm.weights)
    assert has_table == (position_encoding == "learned")
    classifier = build_model(cfg, 400, 2, pretrained_backbone(mlm, cfg.model.backbone))
    names = [layer.name for layer in classifier.backbone.layers[1:]]
    assert names == ["embedding", "embedding_dropout", "encoder_0", "encoder_1", "final_norm"]
    mine, theirs = classifier.backbone.get_weights(), mlm.backbone.get_weights()
    assert len(mine) == len(theirs) == len(mlm.backbone.weights)
    for a, b in zip(mine, theirs):
        np.testing.assert_array_equal(a, b)
    # Fine-tuning's dropout, not the stage's; attention dropout as model.backbone.attention_dropout says.
    assert mlm.backbone.arguments["dropout"] == 0.0 and mlm.backbone.arguments["attention_dropout"] == 0.0
    assert classifier.backbone.arguments["dropout"] == 0.3
    assert classifier.backbone.get_layer("encoder_1").dropout == 0.3
    assert classifier.backbone.arguments["attention_dropout"] == cfg.model.backbone.attention_dropout


def test_encode_masked_text_and_its_errors():
    from mha_project.data.pipeline import TextPreprocessor
    from mha_project.data.vocabulary import make_vectorizer
    from mha_project.extras.pretraining.fill_mask import encode_masked_text
    from mha_project.extras.pretraining.masking import with_mask_token

    vectorizer = make_vectorizer(None, 10, vocabulary=with_mask_token(["the", "coffee", "was"], 10))
    ids = encode_masked_text("The coffee [mask] was [MASK]", TextPreprocessor(vectorizer, seq_len=10))
    assert ids.tolist() == [2, 3, 5, 4, 5]
    with pytest.raises(UserError, match=r"has no \[MASK\]"):
        encode_masked_text("the coffee", TextPreprocessor(vectorizer, seq_len=10))
    head, tail = TextPreprocessor(vectorizer, seq_len=2), TextPreprocessor(vectorizer, seq_len=2, truncation="tail")
    with pytest.raises(UserError, match=r"outside the 2 tokens the model reads \(data.seq_len=2, data.truncation=head"):
        encode_masked_text("the coffee was [MASK]", head)
    # ... which data.truncation=tail keeps: the stage read the texts' ends
    assert encode_masked_text("the coffee was [MASK]", tail).tolist() == [4, 5]
    with pytest.raises(UserError, match="data.truncation=tail"):
        encode_masked_text("[MASK] coffee was the", tail)


@pytest.mark.parametrize(
    "override, message",
    [
        ("pretrain.mask_rate=1.5", "pretrain.mask_rate=1.5 is invalid: must be a number in (0, 1)"),
        ("pretrain.epochs=0", "pretrain.epochs=0 is invalid: must be an integer >= 1"),
        ("pretrain.lr=0", "pretrain.lr=0.0 is invalid: must be a number > 0"),
        (
            "pretrain.objective=electro",
            "pretrain.objective=electro is invalid: must be one of none, mlm, electra",
        ),
        ("pretrain.generator_size=0", "pretrain.generator_size=0.0 is invalid: must be a number in (0, 1]"),
        ("+pretrain.mask_prob=0.2", "pretrain.mask_prob is not a setting of this project"),
        ("pretrain.probe_texts=[no mask here]", "pretrain.probe_texts has 'no mask here'"),
        ("pretrain.from_run=/nonexistent/run", "pretrain.from_run=/nonexistent/run does not exist"),
    ],
)
def test_bad_pretrain_values_are_one_line_errors(override, message):
    from mha_project.config import validate_config

    extra = ["pretrain=mlm"] if "extra_unlabeled" in override else []
    extra = ["pretrain=electra"] if "generator_size" in override else extra
    with pytest.raises(ConfigError) as err:
        validate_config(compose_cfg(*extra, override))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_pretrain_from_and_pretrain_mlm_together_are_refused(tmp_path):
    from mha_project.config import validate_config

    with pytest.raises(ConfigError, match="so this run does not pretrain: drop pretrain=mlm"):
        validate_config(compose_cfg("pretrain=mlm", f"pretrain.from_run={tmp_path}"))


# ----------------------------------------------------------------------------------------------
# End to end: tiny runs
# ----------------------------------------------------------------------------------------------

PRETRAIN = [*TINY, "pretrain=mlm", "pretrain.epochs=6", "pretrain.lr=0.01", "data.limit=300"]


def read_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def pretrained_run(tmp_path_factory):
    """A tiny pretrain -> fine-tune run, in process, with a spy on the copy into the classifier."""
    import mha_project.extras.pretraining.stage as stages  # where the stage looks up pretrained_backbone
    from mha_project.training.train import train

    run_dir = tmp_path_factory.mktemp("pretrain") / "run"
    seen = {}
    real_backbone = stages.pretrained_backbone

    def spy(pretrainer, backbone_cfg):
        backbone = real_backbone(pretrainer, backbone_cfg)
        seen["classifier"] = {layer.name: [w.copy() for w in layer.get_weights()] for layer in backbone.layers}
        return backbone

    stages.pretrained_backbone = spy
    try:
        metrics = train(compose_cfg(*PRETRAIN), run_dir)
    finally:
        stages.pretrained_backbone = real_backbone
    return run_dir, metrics, seen


@pytest.mark.slow
def test_pretrain_then_fine_tune_in_one_run_directory(pretrained_run):
    from mha_project.extras.analysis.runs import load_masked_lm

    run_dir, metrics, seen = pretrained_run
    rows = read_rows(run_dir / "pretrain" / "history.csv")
    assert [int(r["epoch"]) for r in rows] == list(range(1, 7))
    assert not any(k.startswith("val_") for k in rows[0])  # no empty validation columns
    losses = [float(r["loss"]) for r in rows]
    assert losses[-1] < losses[0] - 0.3, losses  # it learns something about the tiny corpus
    for r in rows:
        assert float(r["perplexity"]) == pytest.approx(np.exp(float(r["loss"])), rel=1e-6)

    summary = metrics["pretrain"]
    assert summary["objective"] == "mlm" and summary["epochs"] == 6 and summary["from"] is None
    assert summary["masked_lm_loss"] == pytest.approx(losses[-1])
    assert 0 <= summary["masked_accuracy"] <= 1 and summary["seconds"] > 0
    assert summary["texts"] == 300  # the training split only (data.limit=300)
    assert json.loads((run_dir / "metrics.json").read_text())["pretrain"] == summary
    assert json.loads((run_dir / "run.json").read_text())["stage"] == "finished"

    # The classifier started from the stage's saved encoder: same weights, layer by layer.
    mlm = load_masked_lm(run_dir)
    assert sorted(seen["classifier"]) == ["embedding", "embedding_dropout", "encoder_0", "token_ids"]
    for name, weights in seen["classifier"].items():
        for a, b in zip(weights, mlm.backbone.get_layer(name).get_weights(), strict=True):
            np.testing.assert_array_equal(a, b)
    # ... and fine-tuning moved them.
    from mha_project.extras.analysis.runs import load_model

    tuned = load_model(run_dir / "model.keras").backbone.get_layer("encoder_0").get_weights()
    assert any(not np.array_equal(a, b) for a, b in zip(tuned, seen["classifier"]["encoder_0"]))

    # TensorBoard: the stage's scalars, attention and fill-mask probes.
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    events = EventMultiplexer()
    events.AddRunsFromDirectory(str(run_dir / "pretrain" / "tensorboard"))
    events.Reload()
    tags = {run: set(events.Runs()[run]["tensors"]) for run in events.Runs()}
    assert {"epoch_loss", "epoch_masked_accuracy", "epoch_perplexity"} <= tags["train"]
    assert set(tags) == {".", "train"}  # the stage's records in two TensorBoard runs
    assert "attention/layer_0" in tags["."] and "attention_entropy/layer_0/head_1" in tags["."]
    assert {f"fill_mask/{k}" for k in range(4)} <= tags["."]
    text = events.Tensors(".", "fill_mask/1")[-1].tensor_proto.string_val[0].decode()
    assert "the coffee was [MASK] and bitter" in text and text.count("(0.") + text.count("(1.") == 5


@pytest.mark.subprocess
@pytest.mark.slow
def test_registering_the_projects_classes_is_enough_to_load_the_stage_model(pretrained_run):
    """As for the classifier (README "What a run leaves behind"): a fresh interpreter that imports the modules of
    the classes (the run's config names them); the stage's model.keras holds a subclassed model on its backbone,
    and no optimizer (resuming reads backup/)."""
    run_dir, _, _ = pretrained_run
    probe = (
        "import keras, mha_project.model, mha_project.extras.pretraining.models\n"
        f"model = keras.saving.load_model({str(run_dir / 'pretrain' / 'model.keras')!r}, safe_mode=True)\n"
        "print(type(model).__name__, type(model.backbone).__name__, getattr(model, 'optimizer', None))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["MaskedLanguageModel", "EncoderBackbone", "None"]


@pytest.mark.slow
def test_fill_mask_script(pretrained_run, tiny_run):
    run_dir, _, _ = pretrained_run
    result = run_script("fill_mask.py", str(run_dir), "this film is [MASK] and [MASK]", "--top-k", "3")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == ["[MASK] 1", "[MASK] 2"]
    for line in lines:
        fields = line.split(":", 1)[1].split()
        words, probs = fields[::2], [float(p) for p in fields[1::2]]
        assert len(words) == 3 and probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1.0001
        assert "[MASK]" not in words

    # More [MASK]s than the model reads: the ones past seq_len are said to be cut, not silently left unanswered.
    many = run_script("fill_mask.py", str(run_dir), " ".join(["[MASK]"] * 100))
    assert many.returncode == 0, many.stderr[-2000:]
    answered = [line for line in many.stdout.splitlines() if line.startswith("[MASK] ")]
    assert 0 < len(answered) < 100
    assert f"notice: the text has 100 [MASK]s; only the {len(answered)} within" in many.stdout

    no_mask = run_script("fill_mask.py", str(run_dir), "this film is good")
    assert no_mask.returncode == 2 and no_mask.stderr.strip().count("\n") == 0
    assert "has no [MASK]" in no_mask.stderr
    no_stage = run_script("fill_mask.py", str(tiny_run), "this film is [MASK]")
    assert no_stage.returncode == 2 and no_stage.stderr.strip().count("\n") == 0
    assert "has no masked-LM stage" in no_stage.stderr and "pretrain=mlm" in no_stage.stderr


@pytest.mark.slow
def test_pretrain_from_reuses_the_encoder_and_checks_it(pretrained_run, tmp_path):
    from mha_project.training.train import train

    source, _, _ = pretrained_run
    base = [*TINY, "data.limit=300", *QUIET]
    metrics = train(compose_cfg(*base, f"pretrain.from_run={source}"), tmp_path / "reuse")
    assert metrics["pretrain"]["from"] == str(source) and metrics["pretrain"]["epochs"] == 6
    assert not (tmp_path / "reuse" / "pretrain").exists()  # no stage of its own

    with pytest.raises(ConfigError) as err:
        train(compose_cfg(*base, f"pretrain.from_run={source}", "heads=4"), tmp_path / "heads")
    assert "model.backbone.num_heads=2 there, 4 here" in str(err.value)
    with pytest.raises(ConfigError) as err:
        train(compose_cfg(*base, f"pretrain.from_run={source}", "data.vocab_size=300"), tmp_path / "vocab")
    assert "has another vocabulary: 400 tokens from data=fine_foods there, 300 from data=fine_foods here" in str(
        err.value
    )
    with pytest.raises(ConfigError) as err:
        train(compose_cfg(*base, f"pretrain.from_run={source}", "model/backbone=rotary"), tmp_path / "rotary")
    assert "model.backbone._target_=mha_project.model.backbone.EncoderBackbone there" in str(err.value)
    for name in ("heads", "vocab", "rotary"):  # refused before anything was trained there
        assert not (tmp_path / name / "history.csv").exists()

    fill = run_script("fill_mask.py", str(tmp_path / "reuse"), "a [MASK] film")
    assert fill.returncode == 2 and f"ask that run: python scripts/fill_mask.py {source}" in fill.stderr


@pytest.mark.slow
def test_a_run_stopped_inside_pretraining_resumes_it_where_it_stopped(tmp_path, monkeypatch):
    # In process: the process ends (here, an exception no handler catches) right after pretraining's first epoch
    # is backed up; what SIGKILL adds (nothing written after the signal) is tested once for the classifier's fit,
    # in test_run_record_resume.py.
    from mha_project.extras.run_record.backup import ResumableBackup

    class Stopped(BaseException):
        pass

    run_dir = tmp_path / "run"
    overrides = [*PRETRAIN, "pretrain.epochs=4", *QUIET, f"hydra.run.dir={run_dir}"]
    history = run_dir / "pretrain" / "history.csv"
    backed_up = ResumableBackup.on_epoch_end

    def stop_after_backup(self, epoch, logs=None):
        backed_up(self, epoch, logs)
        raise Stopped

    with monkeypatch.context() as stopping:
        stopping.setattr(ResumableBackup, "on_epoch_end", stop_after_backup)
        stopped = run_script("train.py", *overrides)
    assert stopped.returncode == 1 and "Stopped" in stopped.stderr, stopped.stderr[-2000:]
    assert len(read_rows(history)) == 1 and not (run_dir / "pretrain" / "model.keras").exists()

    result = run_script("train.py", *overrides)  # the same command again
    assert result.returncode == 0, result.stderr[-3000:]
    rows = read_rows(history)
    assert [int(r["epoch"]) for r in rows] == [1, 2, 3, 4]  # each epoch once, in order
    elapsed = [float(r["elapsed_seconds"]) for r in rows]
    assert elapsed == sorted(elapsed)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["pretrain"]["epochs"] == 4 and metrics["pretrain"]["seconds"] >= elapsed[-1]
    resumed = [line for line in result.stdout.splitlines() if line.startswith("Epoch ")]
    assert "Epoch 1/4" not in resumed and "Epoch 2/4" in resumed  # pretraining picked up after the stopped epoch


@pytest.mark.slow
def test_head_patterns_of_the_pretrained_encoder(pretrained_run):
    run_dir, _, _ = pretrained_run
    result = run_script("head_patterns.py", str(run_dir), "--pretrained", "--texts", "20", "--json")
    assert result.returncode == 0, result.stderr
    pretrained = json.loads(result.stdout)
    assert pretrained["model"] == "pretrained masked LM" and len(pretrained["heads"]) == 2  # 1 layer x 2 heads
    assert (run_dir / "pretrain" / "head_patterns" / "head_patterns.json").is_file()
    tuned = json.loads(run_script("head_patterns.py", str(run_dir), "--texts", "20", "--json").stdout)
    assert tuned["model"] == "classifier"
    # Same texts, other weights: fine-tuning changed what the heads do.
    assert [h["normalized_entropy"] for h in tuned["heads"]] != [h["normalized_entropy"] for h in pretrained["heads"]]


@pytest.mark.slow
def test_sweep_over_pretraining_and_seeds_is_grouped_by_pretrain(tmp_path):
    from mha_project.extras.sweep_report.report import write_report

    sweep = tmp_path / "sweep"
    result = run_sweep(sweep, "pretrain=none,mlm", "seed=1,2", *TINY, "pretrain.epochs=1")
    assert result.returncode == 0, result.stderr[-3000:]
    write_report(sweep)
    with open(sweep / "report_by_config.csv", newline="") as f:
        rows = {r["pretrain"]: r for r in csv.DictReader(f)}
    assert set(rows) == {"none", "mlm"} and all(r["seeds"] == "2" for r in rows.values())
    stages = {
        json.loads((job / "metrics.json").read_text())["hparams"]["pretrain"]: (job / "pretrain").is_dir()
        for job in sweep.iterdir()
        if (job / "metrics.json").exists()
    }
    assert stages == {"none": False, "mlm": True}


@pytest.mark.slow
def test_electra_stage_end_to_end(tmp_path):
    from mha_project.extras.pretraining.fill_mask import fill_mask_in_run
    from mha_project.training.train import train

    run_dir = tmp_path / "electra"
    metrics = train(compose_cfg(*TINY, *QUIET, "pretrain=electra", "pretrain.epochs=3", "pretrain.lr=0.01"), run_dir)
    rows = read_rows(run_dir / "pretrain" / "history.csv")
    assert {"loss", "masked_lm_loss", "replaced_loss", "masked_accuracy", "replaced_accuracy", "perplexity"} <= set(
        rows[0]
    )
    assert float(rows[-1]["replaced_loss"]) < float(rows[0]["replaced_loss"])
    assert float(rows[-1]["perplexity"]) == pytest.approx(np.exp(float(rows[-1]["masked_lm_loss"])), rel=1e-6)
    summary = metrics["pretrain"]
    assert summary["objective"] == "electra" and summary["epochs"] == 3
    assert summary["masked_lm_loss"] == pytest.approx(float(rows[-1]["masked_lm_loss"]))
    assert 0.5 < summary["replaced_accuracy"] <= 1
    filled = fill_mask_in_run(run_dir, "the [MASK] was good", top_k=4)
    assert len(filled) == 1 and len(filled[0]) == 4


@pytest.mark.slow
def test_extra_unlabeled_texts_join_the_pretraining_only(tmp_path):
    from mha_project.training.train import train

    root = write_folder_dataset(tmp_path / "d", per_class=20)
    for i in range(5):
        (root / "train" / "unsup" / f"{i + 1}.txt").write_text(f"unlabeled words number {i}")
    cfg = compose_cfg(
        *TINY,
        *QUIET,
        "data=folder",
        f"data.path={root}",
        "pretrain=mlm",
        "pretrain.epochs=1",
        "pretrain.extra_unlabeled=true",
    )
    metrics = train(cfg, tmp_path / "run")
    assert metrics["train_examples"] == 36  # 40 labelled, 4 of them for validation
    assert metrics["pretrain"]["texts"] == 36 + 6  # + the 6 unlabeled ones, for pretraining only


@pytest.mark.slow
def test_masked_lm_learns_what_only_positions_tell():
    """Ascending or descending runs of ids (s, s+1, ..., s+15 or reversed), 30 % masked: the set of words
    around a gap says little about which id fills it, its neighbours say everything. A masked LM that
    ignored positions (uniform attention, a bag of words) would stay far below the 0.8 asserted here."""
    import keras
    import tensorflow as tf

    from mha_project.extras.pretraining.masking import masked_lm_dataset
    from mha_project.extras.pretraining.models import MaskedLanguageModel
    from mha_project.model.backbone import EncoderBackbone

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    vocab, length, n = 100, 16, 4096
    ids = (rng.integers(2, vocab - length - 1, n)[:, None] + np.arange(length)[None, :]).astype("int32")
    flip = rng.random(n) < 0.5
    ids[flip] = ids[flip, ::-1]
    batches = tf.data.Dataset.from_tensor_slices((ids, np.zeros(n, "int32"))).batch(64)
    ds = masked_lm_dataset(batches, rate=0.3, mask_id=vocab - 1, seed=0)
    backbone = EncoderBackbone(
        vocab_size=vocab, max_len=length, embed_dim=64, num_layers=2, num_heads=4, key_dim=16, ff_dim=128, dropout=0.0
    )
    model = MaskedLanguageModel(backbone)
    model.compile(
        optimizer=keras.optimizers.AdamW(0.003),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="mean_with_sample_weight"),
        weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="masked_accuracy")],
    )
    accuracy = model.fit(ds, epochs=6, verbose=0, shuffle=False).history["masked_accuracy"]
    assert accuracy[0] < 0.3 and accuracy[-1] > 0.8, accuracy


class MaskedLMHeadLayerCheck(TestCase):
    def test_masked_lm_head(self):
        from mha_project.extras.pretraining.models import MaskedLMHead

        # Tied to the token embedding, the head is called with it: the untied form is what stands alone.
        self.run_layer_test(
            MaskedLMHead,
            init_kwargs=dict(vocab_size=11, tie_embeddings=False),
            input_shape=(2, 3, 4),
            expected_output_shape=(2, 3, 11),
            expected_output_dtype="float32",  # logits stay float32 under mixed precision
            expected_num_trainable_weights=6,
        )


@pytest.mark.parametrize(
    "override,needle",
    [
        ("pretrain.lr=abc", "pretrain.lr=abc"),
        (
            "pretrain.from=outputs/runs/x",
            "pretrain.from is not a setting of this project; did you mean pretrain.from_run",
        ),
    ],
)
def test_a_bad_pretrain_setting_is_one_line_before_anything_is_made(tmp_path, override, needle):
    run_dir = tmp_path / "run"
    result = run_script("train.py", override, f"hydra.run.dir={run_dir}")
    assert result.returncode == 2 and result.stderr.startswith("error: ") and needle in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not run_dir.exists()


@pytest.mark.slow
def test_help_offers_the_pretrain_options_and_not_their_shared_base():
    listing = run_script("train.py", "--help").stdout.split("== Configuration groups ==")[1].split("== Config ==")[0]
    groups = dict(line.split(": ", 1) for line in listing.splitlines() if ": " in line)
    assert groups["pretrain"].split(", ") == ["electra", "mlm", "none"]


@pytest.mark.slow
def test_a_run_records_its_pretraining_as_a_hyper_parameter():
    from mha_project.config import hparams_of

    # The config groups Hydra chose (its runtime.choices) are recorded by their group's name.
    assert hparams_of(compose_cfg(), {"pretrain": "none", "hydra/launcher": "basic"}).get("pretrain") == "none"
    assert "hydra/launcher" not in hparams_of(compose_cfg(), {"hydra/launcher": "basic"})
