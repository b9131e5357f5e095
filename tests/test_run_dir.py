"""A run directory as the reading tools and the core's train see it: run.json's format and damage, failure.json's
reason, the ``latest`` file, what a finished run suggests next (mha_project/run_dir.py, scripts/entry.py)."""

import json
import os
import shutil

import pytest

from conftest import QUIET, TINY, compose_cfg, run_script
from mha_project.atomic import write_json_atomic
from mha_project.errors import RunDirRefused, UserError


@pytest.mark.slow
def test_without_a_run_record_train_uses_only_an_empty_dir_and_records_its_stages(tmp_path):
    # The run_record extra left out by config: the core opens only a new or empty directory, and keeps no backup.
    from mha_project.extras.analysis.finished import check_run_dir
    from mha_project.run_dir import RUN_FORMAT
    from mha_project.training.train import train

    cfg = compose_cfg(*TINY, *QUIET, "~run_record")
    assert "run_record" not in cfg
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(RunDirRefused, match=r"mine already holds files \(notes.txt\); use a new hydra.run.dir"):
        train(cfg, mine)
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    metrics = train(cfg, tmp_path / "run")
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["format"] == RUN_FORMAT and record["stage"] == "finished" and "fingerprint" not in record
    assert record["results"]["test_accuracy"] == metrics["test_accuracy"]
    assert check_run_dir(tmp_path / "run") == tmp_path / "run"
    assert not (tmp_path / "run" / "backup").exists() and not (tmp_path / "run" / ".lock").exists()


def test_a_damaged_run_json_is_named_damaged_not_old_and_a_fifo_is_never_opened(tmp_path):
    from mha_project.extras.analysis.finished import check_run_dir
    from mha_project.run_dir import RUN_FORMAT

    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "config.yaml").write_text("seed: 1\n")
    for name in ("metrics.json", "model.keras", "vocab.txt"):
        (tmp_path / name).write_text("{}")
    whole = json.dumps({"format": RUN_FORMAT, "stage": "finished"})
    run_json = tmp_path / "run.json"
    for content, needle in (
        (whole[: len(whole) // 2], "is damaged: it is not valid JSON"),
        ("[1, 2]", "is damaged: it holds a JSON list, not a run record"),
        (json.dumps({"format": str(RUN_FORMAT)}), f"is damaged: its format is '{RUN_FORMAT}', not a whole number"),
    ):
        run_json.write_text(content)
        with pytest.raises(UserError, match=needle) as err:
            check_run_dir(tmp_path)
        assert "another version" not in str(err.value) and "\n" not in str(err.value)
    run_json.unlink()
    run_json.mkdir()
    with pytest.raises(UserError, match="run.json is damaged: it is not a regular file"):
        check_run_dir(tmp_path)
    run_json.rmdir()
    os.mkfifo(run_json)  # opening a FIFO for reading would wait for a writer forever
    with pytest.raises(UserError, match="run.json is damaged: it is not a regular file"):
        check_run_dir(tmp_path)


def test_a_latest_file_naming_no_run_says_so_and_what_it_names(tmp_path):
    from mha_project.extras.analysis.finished import check_run_dir
    from mha_project.run_dir import LATEST_MARK

    runs = tmp_path / "outputs" / "runs"
    (runs / "2026-12-01_10-00-00").mkdir(parents=True)
    (runs / "latest").write_text(f"2026-12-01_10-00-00\n{LATEST_MARK}\n")
    shutil.rmtree(runs / "2026-12-01_10-00-00")
    with pytest.raises(UserError, match="latest names run 2026-12-01_10-00-00, which is not a directory in"):
        check_run_dir(runs / "latest")
    (runs / "latest").write_text("something else\n")
    with pytest.raises(UserError, match="latest names no run: it is not the file scripts/train.py writes"):
        check_run_dir(runs / "latest")


def test_a_recorded_reason_reaches_the_terminal_without_its_control_characters(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").write_text("seed: 1\n")
    (run_dir / "failure.json").write_text(json.dumps({"reason": "disk \x1b[2J\x1b]0;owned\x07 full"}))
    result = run_script("evaluate.py", str(run_dir))
    assert result.returncode == 2 and "\x1b" not in result.stderr and "\x07" not in result.stderr
    assert "disk ?[2J?]0;owned? full" in result.stderr


def test_next_steps_quote_paths_that_need_it_and_fit_the_run(tmp_path):
    import shlex

    from mha_project.attention import ATTENTION_PLUGIN

    from entry import next_steps

    odd = tmp_path / 'my runs <1> "x"'
    steps = next_steps(odd).splitlines()[1:]
    assert steps[0].strip() == f"python scripts/evaluate.py {shlex.quote(str(odd))}"
    assert shlex.split(steps[0])[-1] == str(odd)  # a shell reads the path back whole
    assert steps[-1].strip().endswith("the Attention tab: http://localhost:6006/#attention")
    assert (
        ATTENTION_PLUGIN == "attention"
    )  # the plugin's name is the tab's route (mha_project/extras/head_view/plugin.py)
    bag = next_steps(tmp_path / "bag", attention=False)
    assert "inspect_attention.py" not in bag and "head_patterns.py" not in bag and "attention.html" not in bag


def test_atomic_write_leaves_old_file_when_serialisation_fails(tmp_path):
    path = tmp_path / "metrics.json"
    write_json_atomic(path, {"test_accuracy": 0.5})
    with pytest.raises(TypeError):
        write_json_atomic(path, {"bad": object()})
    assert json.loads(path.read_text()) == {"test_accuracy": 0.5}
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]  # no temp file left behind
