"""data=relations: seeded tasks a bag of words cannot do, learned in seconds, and head_patterns naming the head
that reads each task's rule in a trained model."""

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from conftest import compose_cfg, load_splits
from mha_project.config import validate_config
from mha_project.errors import ConfigError
from mha_project.extras.relations.tasks import BAD, GOOD, NUMBERS, TASKS, generate, patching_pairs


def rule(task: str, text: str) -> int:
    """The label by each task's docstring, read back from the words."""
    words = text.split()
    if task == "negation":
        good = next(w for w in words if w in GOOD + BAD) in GOOD
        return int(good != ("not" in words))
    if task == "recall":  # odd: the value after the asked key's earlier occurrence
        return NUMBERS.index(words[words.index(words[-1]) + 1]) % 2
    at = words.index({"marker": "is", "successor": "then"}[task])
    before, after = NUMBERS.index(words[at - 1]), NUMBERS.index(words[at + 1])
    return int(after == before) if task == "marker" else int(after == (before + 1) % len(NUMBERS))


@pytest.mark.parametrize("task", list(TASKS))
def test_each_task_labels_by_its_rule_balances_its_classes_and_repeats_with_its_seed(task):
    (texts, labels), (test_texts, test_labels), classes = generate(task, 2000, 300, seed=1)
    assert len(classes) == 2 and len(texts) == 2000 and len(test_texts) == 300
    assert [rule(task, t) for t in texts + test_texts] == list(labels) + list(test_labels)
    assert 0.45 < np.mean(labels) < 0.55
    again, _, _ = generate(task, 2000, 300, seed=1)
    other, _, _ = generate(task, 2000, 300, seed=2)
    assert again[0] == texts and other[0] != texts


@pytest.mark.parametrize("task", list(TASKS))
def test_a_patching_twin_differs_where_the_rule_reads_and_has_the_other_label(task):
    clean, twins, labels, _ = patching_pairs(task, 400, seed=1)
    for text, twin, label in zip(clean, twins, labels):
        changed = [(a, b) for a, b in zip(text.split(), twin.split()) if a != b]
        assert len(twin.split()) == len(text.split()), (text, twin)
        if task == "recall":  # two keys trade places: the same words, another key before the asked value
            assert len(changed) == 2 and sorted(text.split()) == sorted(twin.split()), (text, twin)
        else:
            assert len(changed) == 1, (text, twin)
        assert rule(task, text) == label and rule(task, twin) == 1 - label, (text, twin)
    assert 0.4 < np.mean(labels) < 0.6 and clean != generate(task, 400, 1, seed=1)[0][0]  # not the run's texts


@pytest.mark.slow
@pytest.mark.parametrize("task", list(TASKS))
def test_no_word_and_no_pair_of_neighbours_tells_the_classes_apart(task):
    (texts, labels), _, _ = generate(task, 20000, 1, seed=3)
    seen, positive = Counter(), Counter()
    for text, label in zip(texts, labels):
        words = text.split()
        features = set(words) | set(zip(words, words[1:]))
        seen.update(features)
        positive.update(features if label else ())
    common = [f for f, n in seen.items() if n >= 300]
    assert len(common) > 20
    # Each word and bigram seen 300+ times is in both classes alike (binomial spread at n=300: +-0.03).
    worst = max(common, key=lambda f: abs(positive[f] / seen[f] - 0.5))
    assert abs(positive[worst] / seen[worst] - 0.5) < 0.1, (worst, positive[worst], seen[worst])


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["data=relations", "data.task=parity"], r"^data.task=parity is invalid: must be one of marker, successor"),
        (["data=relations", "data.examples=0"], r"^data.examples=0 is invalid: must be an integer from 1 to 10000000"),
        (
            ["data=relations", "data.test_examples=100000000000"],
            r"^data.test_examples=100000000000 is invalid: must be an integer from 1 to 10000000",
        ),
        (["data=relations", "seq_len=4"], r"^data.seq_len=4 is too short for data.task=marker: .* give seq_len >= 16"),
        (["data=relations", "data.task=negation", "seq_len=5"], r"^data.seq_len=5 is too short for data.task=negation"),
        (
            ["data=relations", "model.backbone.sliding_window=0"],
            r"^model.backbone.sliding_window=0 is invalid: must be null or an",
        ),
    ],
)
def test_bad_relations_settings_are_refused_in_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message) as err:
        validate_config(compose_cfg(*overrides))
    assert "\n" not in str(err.value)


def test_a_relations_key_on_other_data_is_answered_with_the_data_that_has_it():
    from hydra.errors import ConfigCompositionException

    from mha_project.config import not_a_setting

    with pytest.raises(ConfigCompositionException, match="Could not override 'data.task'"):
        compose_cfg("data.task=marker")  # the entry point answers it with not_a_setting's one line
    assert not_a_setting("data.task").startswith(
        "data.task is not a setting of the options chosen: it belongs to relations (data)"
    )


def test_a_head_count_that_does_not_divide_the_width_is_refused_in_one_line():
    cfg = compose_cfg("data=relations", "heads=3")
    with pytest.raises(ConfigError, match=r"^heads=3 does not divide the attention width 64: choose one of 1, 2, 4, 8"):
        validate_config(cfg)


def test_the_model_relations_sets_is_said_first_with_the_values_the_run_uses():
    import logging

    from hydra.utils import instantiate

    cfg = compose_cfg("data=relations", "heads=2", "embed_dim=48", "data.examples=50", "data.test_examples=10")
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("mha_project.extras.relations.tasks")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        instantiate(cfg.data).splits(cfg.seed)
    finally:
        logger.removeHandler(handler)
    said = [r.getMessage() for r in records if "data=relations sets the model" in r.getMessage()]
    assert len(said) == 1 and "model/backbone=rotary" in said[0]
    assert "embed_dim=48" in said[0] and "key_dim=32" in said[0] and "model.pooling=mean_max" in said[0]


# The smallest runs that learn each task (the documented setting on fewer texts and epochs).
SMALL = {
    "marker": ["data.examples=12000", "epochs=3"],
    "successor": ["data.examples=12000", "epochs=5"],
    "negation": ["data.examples=2000", "epochs=2"],
    "recall": ["data.examples=40000", "epochs=1", "layers=2"],  # two layers compose within 600 steps of 64 texts
}


@pytest.fixture(scope="module")
def relation_runs(tmp_path_factory) -> dict:
    from mha_project.training.train import train

    runs = {}
    for task, overrides in SMALL.items():
        run_dir = tmp_path_factory.mktemp(task) / "run"
        cfg = compose_cfg(
            "data=relations",
            f"data.task={task}",
            "data.test_examples=1000",
            "heads=2",
            "savedmodel.export=false",
            "logger.attention.every_n_epochs=0",
            *overrides,
        )
        runs[task] = (run_dir, train(cfg, run_dir))
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("task", list(SMALL))
def test_a_small_run_learns_the_task_and_head_patterns_names_the_head_that_reads_its_rule(relation_runs, task):
    from mha_project.extras.head_analysis.patterns import run_head_patterns

    run_dir, metrics = relation_runs[task]
    assert metrics["test_accuracy"] >= 0.95, metrics["test_accuracy"]
    result = run_head_patterns(run_dir, num_texts=300, out=Path(run_dir) / "patterns")
    relations = {r["relation"]: r for r in result["relations"]}
    links = TASKS[task][2]
    assert set(relations) == set().union(*map(links, validation_words(run_dir)))  # every relation the rule reads
    followed = [r for r in relations.values() if r["head"] is not None]
    assert followed, relations  # a model that learned the rule has a head on its positions
    for relation in followed:
        named, mass = relation["head"], np.asarray(relation["mass"])
        # the named head is the one whose attention goes from the rule's query to its key the most, far above
        # what uniform attention would put there
        assert mass[named["layer"], named["head"]] == mass.max() >= 4 * relation["chance"]
    assert "layer 0 head" in (Path(run_dir) / "patterns" / "head_patterns.md").read_text()


@pytest.mark.slow
def test_patching_names_the_head_that_reads_the_rule_and_tensorboard_shows_when_it_formed(relation_runs):
    from conftest import run_script

    run_dir, metrics = relation_runs["successor"]
    result = run_script("head_patching.py", str(run_dir), "--pairs", "100")
    assert result.returncode == 0, result.stderr[-2000:]
    saved = json.loads((Path(run_dir) / "head_patching" / "patching.json").read_text())
    assert {"recovered", "top", "pairs", "metric", "layer_recovered"} <= set(saved) and saved["pairs"] == 100
    assert np.array(saved["recovered"]).shape == (1, 2) and len(saved["layer_recovered"]) == 1
    layer, head = saved["top"]
    # the top head restores a share far from nothing, and the layer's heads together more than any one alone
    assert saved["recovered"][layer][head] == np.nanmax(saved["recovered"]) >= 0.25
    assert saved["layer_recovered"][0] >= max(0.5, saved["recovered"][layer][head])
    # head_patterns names the same head for a relation of the rule
    patterns = run_script("head_patterns.py", str(run_dir), "--json")
    named = [r["head"] for r in json.loads(patterns.stdout)["relations"] if r["head"] is not None]
    assert {"layer": layer, "head": head} in [{"layer": n["layer"], "head": n["head"]} for n in named], named
    assert "| 0 | 1 |" in (Path(run_dir) / "head_patching" / "patching.md").read_text()
    # the callback's line per head, a point every 100 optimizer steps from the first where the model tells the
    # twins apart, and the script's record beside them
    from conftest import event_records, scalar_events

    analysis = Path(run_dir) / "tensorboard" / "analysis"
    steps = scalar_events(analysis, "head_patching/training/")
    val = [float(row.split(",")[4]) for row in (Path(run_dir) / "history.csv").read_text().splitlines()[1:]]
    per_epoch = -(-int(0.9 * 12000) // 64)  # the successor run's training texts (SMALL) in batches of 64
    learned = per_epoch * next(epoch for epoch, accuracy in enumerate(val, 1) if accuracy >= 0.9)
    recorded = sorted(step for step, _ in steps["head_patching/training/layer_0/head_1"])
    assert recorded == list(range(recorded[0], recorded[-1] + 1, 100)) and recorded[0] <= learned, recorded
    assert recorded[-1] > len(val) * per_epoch - 100
    assert {"head_patching/recovered/layer_0/head_0", "head_patching"} <= set(event_records(analysis))
    # the callback's pairs are the run's own token ids of the task's texts and twins
    from mha_project.extras.analysis.runs import load_run
    from mha_project.extras.relations.callback import PatchingDuringTraining
    from mha_project.extras.relations.tasks import patching_pairs

    callback = PatchingDuringTraining("successor", 1, str(run_dir), pairs=8)
    callback.on_train_begin()
    clean, twins, _, _ = patching_pairs("successor", 8, 1)
    run = load_run(run_dir)
    np.testing.assert_array_equal(callback.clean, run.token_ids(clean))
    np.testing.assert_array_equal(callback.corrupted, run.token_ids(twins))
    callback.on_train_end()


@pytest.mark.slow
def test_patching_a_recall_run_names_a_previous_token_head_in_layer_0_and_the_reading_head_in_layer_1(relation_runs):
    from mha_project.extras.head_analysis.patching import run_head_patching
    from mha_project.extras.head_analysis.patterns import run_head_patterns

    run_dir, _ = relation_runs["recall"]
    recovered = np.array(run_head_patching(run_dir, pairs=100, out=Path(run_dir) / "patching")["recovered"])
    labels = {(h["layer"], h["head"]): h["label"] for h in run_head_patterns(run_dir, num_texts=200)["heads"]}
    # the look-up is one head of the second layer, reading from the last word ...
    assert recovered.shape == (2, 2) and recovered[1].max() == recovered.max() >= 0.8, recovered
    # ... fed by a first-layer head that reads the word before each word: which key a value follows
    reader = int(np.argmax(recovered[0]))
    assert recovered[0, reader] >= 0.2 and labels[(0, reader)] == "previous-token", (recovered, labels)


@pytest.mark.slow
def test_positions_the_rule_does_not_relate_are_followed_by_no_head(relation_runs):
    from mha_project.extras.analysis.runs import load_run
    from mha_project.extras.head_analysis.patterns import relation_heads

    run = load_run(relation_runs["marker"][0], needs_attention=True)
    (texts, _), _, _ = generate("marker", 300, 1, seed=9)

    def elsewhere(words):  # two words three and five places away from the marker: the rule reads neither
        at = words.index("is")
        return {
            "elsewhere": [(q, k) for q, k in [(at - 3, at + 2), (at + 3, at - 2)] if 0 <= min(q, k) and max(q, k) < 16]
        }

    (measured,) = relation_heads(run.model, run.preprocessor, texts, elsewhere)
    assert measured["head"] is None and np.max(measured["mass"]) < 2 * measured["chance"], measured


def validation_words(run_dir) -> list[list[str]]:
    """The words of the run's first 300 validation texts (those head_patterns reads)."""
    from mha_project.extras.analysis.runs import load_run

    run = load_run(run_dir, needs_attention=True)
    return [text.split() for text in load_splits(run.cfg.data, int(run.cfg.seed)).val_texts[:300]]
