"""Bad input through the real CLI: one clear line, non-zero exit, no traceback, nothing overwritten."""

import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import keras
import pytest

from conftest import (
    OUT_OF_RANGE,
    QUIET,
    ROOT,
    TINY,
    assert_clean_failure,
    compose_cfg,
    run_script,
    train_tiny,
    write_folder_dataset,
)

BAD_OVERRIDES = [
    *((override, override) for override in OUT_OF_RANGE),
    ("model.backbone.attention_dropout=1.0", "model.backbone.attention_dropout=1.0"),
    ("heads=abc", "heads=abc"),
    ("data=nope", "fine_foods"),
    ("+foo=1", "foo is not a setting of this project"),
    ("+model.bar=2", "model.bar is not a setting"),
    # A typo is answered with the setting meant, never with Hydra's advice to add it with '+'.
    ("head=8", "head is not a setting of this project; did you mean heads?"),
    ("+head=8", "head is not a setting of this project; did you mean heads?"),
    ("model.backbone.num_head=8", "did you mean model.backbone.num_heads"),
    # A key of a part the options chosen do not include is answered with the part that has it.
    ("model.ngram_branch.c=auto", "model.ngram_branch.c is not a setting of the options chosen: it belongs to linear"),
    (
        "experiment=wide_deep model/ngram_branch=mean",  # the experiment sets the linear bags' C; the mean bag has none
        "experiment/wide_deep: model.ngram_branch.c is not a setting of the options chosen: it belongs to linear_bag",
    ),
    ("debug=default", "tiny"),  # Hydra lists the debug configs there are
    ("seed=-1", "seed=-1 is invalid"),
    ("seed=5000000000", "seed=5000000000 is invalid"),
    ("logger.attention.num_probes=-1", "logger.attention.num_probes=-1 is invalid"),
    ("data.seq_len=200", "data.seq_len=200 is invalid: must be <= model.backbone.max_len=128"),
    ("logger.profile_batches=[5]", "logger.profile_batches=[5] is invalid"),
    ('logger.attention.probe_texts=[""]', "has '', which has no words"),
    ("logger.attention.probe_texts=['?!...']", "has '?!...', which has no words"),
    ("seq_len=100000 data.bucketing=false", "attention alone would need about"),
    ("model/backbone=rotary key_dim=7", "key_dim=7 is invalid with model/backbone=rotary"),
    (
        "model.pooling=cls model.backbone.cls_token=false",
        "model.pooling=cls is invalid with model.backbone.cls_token=false",
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize("override,needle", BAD_OVERRIDES)
def test_bad_overrides(tmp_path, override, needle):
    run_dir = tmp_path / "run"
    result = run_script("train.py", *override.split(" "), f"hydra.run.dir={run_dir}")
    assert_clean_failure(result, needle)
    # One line and exit 2, Hydra's own composition errors (heads=abc, data=nope) included.
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr[-2000:]
    assert result.stderr.startswith("error: ") and "+head" not in result.stderr
    assert not run_dir.exists()  # validated before Hydra creates the run directory
    if override.startswith(("heads=0", "lr=", "dropout=")):
        error_lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert len(error_lines) == 1 and "must be" in error_lines[0]


def test_a_hydra_report_of_several_lines_is_one_line_with_its_options_joined():
    from entry import one_line

    report = ValueError("Could not find 'data/nope'\n\nAvailable options in 'data':\n\tfolder\n\timdb")
    assert one_line(report) == "Could not find 'data/nope'; Available options in 'data': folder, imdb"


@pytest.mark.slow
def test_tools_refuse_paths_that_are_not_finished_runs(tmp_path):
    (tmp_path / "unfinished" / ".hydra").mkdir(parents=True)
    (tmp_path / "unfinished" / ".hydra" / "config.yaml").write_text("seed: 1\n")
    for script in ("evaluate.py", "inspect_attention.py"):
        extra = ["some text"] if script == "inspect_attention.py" else []
        assert_clean_failure(run_script(script, str(tmp_path / "nope"), *extra), "does not exist")
        assert_clean_failure(run_script(script, str(tmp_path), *extra), "is not a run directory")
        assert_clean_failure(run_script(script, str(tmp_path / "unfinished"), *extra), "never finished")


def test_lambda_model_is_refused(tmp_path):
    from mha_project.errors import UserError
    from mha_project.extras.analysis.runs import load_model

    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Lambda(lambda x: x * 2)(inputs))
    model.save(tmp_path / "lambda.keras")
    with pytest.raises(UserError, match="Lambda"):
        load_model(tmp_path / "lambda.keras")


@pytest.mark.slow
def test_evaluate_refuses_a_run_whose_model_has_a_lambda(tiny_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    inputs = keras.Input((3,))
    keras.Model(inputs, keras.layers.Lambda(lambda x: x * 2)(inputs)).save(run / "model.keras")
    assert_clean_failure(run_script("evaluate.py", str(run)), "refusing to load", "Lambda")


@pytest.mark.slow
def test_nan_loss_stops_with_a_clear_message(tmp_path):
    # The one line only: no NumPy warning from the NaN attention logged on the way (a terminal would show it).
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        result = train_tiny(tmp_path / "run", "lr=1e12", "trainer.warmup_fraction=0")
    assert_clean_failure(result, "training diverged", "lr=")
    assert not (tmp_path / "run" / "metrics.json").exists()


@pytest.mark.slow
def test_a_diverged_run_keeps_no_nan_checkpoint_and_names_its_one_epoch(tmp_path):
    # NaN weights still score the majority share: they are never kept as the "best" epoch.
    run = tmp_path / "run"
    result = train_tiny(run, "data.limit=200", "lr=1e10", *QUIET)
    assert_clean_failure(result, "training diverged: loss became NaN/inf in epoch 1 of 1")
    assert "no epoch ended with finite weights, so no checkpoint is kept and no test result" in result.stderr
    assert not (run / "checkpoints" / "best.weights.h5").exists()
    assert "test_accuracy" not in json.loads((run / "run.json").read_text())["results"]


@pytest.mark.slow
def test_a_run_dir_is_not_overwritten_by_a_bad_rerun(tiny_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    before = {name: (run / name).read_bytes() for name in ("metrics.json", ".hydra/config.yaml", "model.keras")}
    assert_clean_failure(run_script("train.py", *TINY, "heads=0", f"hydra.run.dir={run}"), "heads=0")
    for name, content in before.items():
        assert (run / name).read_bytes() == content, name
    assert json.loads(before["metrics.json"])["test_accuracy"] >= 0


def damage(run_dir: Path, case: str) -> None:
    if case == "truncated model.keras":
        data = (run_dir / "model.keras").read_bytes()
        (run_dir / "model.keras").write_bytes(data[: len(data) // 2])
    elif case == "garbage metrics.json":
        (run_dir / "metrics.json").write_text("{not json")
    elif case == "empty metrics.json":
        (run_dir / "metrics.json").write_text("{}")
    elif case == "garbage config.yaml":
        (run_dir / ".hydra" / "config.yaml").write_text("data: [unclosed\n  : :")
    elif case == "deleted vocab.txt":
        (run_dir / "vocab.txt").unlink()


@pytest.mark.slow
@pytest.mark.parametrize(
    "case,needle",
    [
        ("truncated model.keras", "model.keras cannot be loaded"),
        ("garbage metrics.json", "metrics.json cannot be loaded"),
        ("empty metrics.json", "metrics.json cannot be loaded (ValueError: no test_accuracy, class_names)"),
        ("garbage config.yaml", "config.yaml cannot be loaded"),
        ("deleted vocab.txt", "is damaged: it finished, but vocab.txt is missing"),
    ],
)
def test_damaged_run_dirs_give_one_line(tiny_run, tmp_path, case, needle):
    run_dir = tmp_path / "run"
    shutil.copytree(tiny_run, run_dir)
    damage(run_dir, case)
    assert_clean_failure(run_script("evaluate.py", str(run_dir)), needle)


@pytest.mark.slow
def test_tools_refuse_bad_arguments_in_one_line(tiny_run, tmp_path):
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    cases = [
        (("inspect_attention.py", str(tiny_run), "great coffee", "--max-tokens", "0"), "--max-tokens=0 is invalid"),
        (("benchmark.py", "--epochs", "0"), "--epochs=0 is invalid"),
    ]
    for args, needle in cases:
        assert_clean_failure(run_script(*args), needle)
    no_history = tmp_path / "run"
    shutil.copytree(tiny_run, no_history)
    (no_history / "history.csv").unlink()
    assert_clean_failure(run_script("time_to_accuracy.py", str(no_history)), "has no history.csv")


@pytest.mark.slow
def test_inspect_out_directory_and_texts_with_the_same_readable_part(tiny_run, tmp_path):
    for text in ("🙂🙂", "😡😡"):
        result = run_script("inspect_attention.py", str(tiny_run), f"great {text}", "--out", str(tmp_path))
        assert result.returncode == 0, result.stderr[-2000:]
    assert len(list(tmp_path.glob("attention_great_*.png"))) == 2  # neither overwrote the other


@pytest.mark.slow
def test_inspect_into_an_unwritable_place_and_a_run_whose_data_folder_moved(tiny_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(tiny_run, run_dir)
    (run_dir / "inspect").write_text("a file where the folder should be")  # root ignores read-only bits
    assert_clean_failure(run_script("inspect_attention.py", str(run_dir), "great coffee"), "cannot write", "--out")

    data = write_folder_dataset(tmp_path / "data", per_class=6)
    (data / "test" / "extra").mkdir()
    (data / "test" / "extra" / "0.txt").write_text("a class with no train/ twin")
    folder_run = tmp_path / "folder_run"
    result = train_tiny(folder_run, "data=folder", f"data.path={data}", *QUIET)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.count("test/extra has no train/ twin and is ignored") == 1  # it was printed three times
    # Files added to test/ after training: the tools warn that the data changed since the recorded figures.
    from mha_project.errors import UserError
    from mha_project.extras.analysis.evaluate import evaluate_run
    from mha_project.extras.analysis.runs import load_run

    assert evaluate_run(folder_run)["data_changed"] == []  # in-process; the command line is checked next
    for i in range(4):
        (data / "test" / "pos" / f"added_{i}.txt").write_text("a new review")
    changed = run_script("evaluate.py", str(folder_run))
    assert changed.returncode == 0, changed.stderr[-2000:]
    assert "warning: the test split differs from the one this run recorded (16 texts now, 12 then" in changed.stderr
    assert "train split" not in changed.stderr
    report = json.loads(changed.stdout[changed.stdout.index("{") : changed.stdout.rindex("}") + 1])
    assert len(report["data_changed"]) == 1
    data.rename(tmp_path / "moved")
    assert_clean_failure(run_script("evaluate.py", str(folder_run)), f"data.path={data}, no longer exists")
    with pytest.raises(UserError, match=f"data.path={data}, no longer exists"):
        load_run(folder_run)  # what every tool that reads the data calls


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "backend,needle",
    [
        ("nonsense", "KERAS_BACKEND=nonsense is invalid: this project trains on KERAS_BACKEND=tensorflow"),
        ("torch", "KERAS_BACKEND=torch is invalid"),
    ],
)
@pytest.mark.slow
def test_a_backend_that_cannot_train_is_one_line_before_anything_loads(tmp_path, backend, needle):
    # A fresh process: KERAS_BACKEND is read when Keras is first imported.
    result = run_script("train.py", f"hydra.run.dir={tmp_path / 'run'}", env={"KERAS_BACKEND": backend})
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [f"error: {result.stderr.strip()[7:]}"]
    assert needle in result.stderr and not (tmp_path / "run").exists()


def test_a_missing_backend_names_the_extra_that_brings_it(monkeypatch):
    from mha_project.config import validate_config
    from mha_project.errors import ConfigError

    monkeypatch.setenv("KERAS_BACKEND", "jax")
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None if name == "jax" else object())
    with pytest.raises(ConfigError, match=r'KERAS_BACKEND=jax is not installed here: pip install -e "\.\[jax\]"'):
        validate_config(compose_cfg())


@pytest.mark.slow
def test_a_run_or_sweep_dir_that_cannot_be_made_is_one_line(tmp_path):
    (tmp_path / "a_file").write_text("mine")
    for key, place, why in (
        ("hydra.run.dir", "/proc/x", "No such file or directory"),
        ("hydra.run.dir", "/sys/kernel/x", "Operation not permitted"),
        ("hydra.run.dir", f"{tmp_path / 'a_file'}/run", "Not a directory"),
        ("hydra.sweep.dir", "/proc/x", "No such file or directory"),
    ):
        multirun = ["-m", "heads=1,2"] if key == "hydra.sweep.dir" else []
        result = run_script("train.py", *multirun, *TINY, f"{key}={place}")
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr[-2000:]
        assert result.stderr.startswith(f"error: {key}={place} cannot be used: {why}"), result.stderr
    assert (tmp_path / "a_file").read_text() == "mine"


@pytest.mark.slow
def test_an_output_folder_that_is_a_file_or_missing_is_refused_before_any_work(tiny_run, tmp_path):
    mine = tmp_path / "notes.txt"
    mine.write_text("mine")
    for script, out, needle in (
        ("head_patterns.py", mine, f"--out={mine} is a file: --out takes a folder (it gets head_patterns.png"),
        ("head_importance.py", mine / "x", f"--out={mine / 'x'} lies under {mine}, which is a file: --out takes"),
    ):
        result = run_script(script, str(tiny_run), "--out", str(out))
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: {needle}"), lines
    assert mine.read_text() == "mine"
    source = tmp_path / "data"
    (source / "train" / "pos").mkdir(parents=True)
    (source / "train" / "pos" / "1.txt").write_text("good")
    result = run_script("scale_table.py", str(source), str(tmp_path / "missing" / "t.csv"), "--rows", "3")
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'missing'} is no folder: create it first, or give a table in an existing folder"
    ]
    result = run_script("scale_table.py", str(source), str(tmp_path / "t.csv"), "--rows", "3")
    assert result.returncode == 0 and len((tmp_path / "t.csv").read_text().splitlines()) == 4


@pytest.mark.subprocess
@pytest.mark.slow
def test_a_stop_signal_ends_a_command_stuck_in_a_library_call_within_its_grace():
    # A fresh process: a signal is the behaviour. Its main thread blocks SIGTERM and sleeps in C, as a data-parallel
    # worker whose peer died waits in a collective: no Python handler can run there.
    import signal
    import time

    stuck = (
        "import ctypes, signal, sys\n"
        "sys.path.insert(0, 'scripts')\n"
        "from entry import end_within\n"
        "def stop(signum, frame):\n"
        "    raise KeyboardInterrupt\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "end_within(1)\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])\n"
        "print('ready', flush=True)\n"
        "ctypes.CDLL(None).sleep(120)\n"
    )
    process = subprocess.Popen(  # its own session: no signal meant for the test's process group reaches it
        [sys.executable, "-c", stuck],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert process.stdout.readline() == "ready\n"
    time.sleep(1)  # inside the C call by now (a signal earlier would reach its Python handler, as it should)
    process.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    _, err = process.communicate(timeout=60)
    assert time.monotonic() - sent < 10 and process.returncode == 128 + signal.SIGTERM, (process.returncode, err)
    assert err.strip().splitlines() == ["error: stopped by SIGTERM: a library call did not return within 1 s"]
