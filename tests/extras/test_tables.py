"""data=table (CSV, TSV, JSON lines, Parquet) and scripts/predict.py, on small generated tables: no download."""

import csv
import json
import logging
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import QUIET, compose_cfg, event_records, load_splits, poll, run_script, train_tiny
from mha_project.config import validate_config
from mha_project.errors import ConfigError
from mha_project.extras.tables.tables import class_names_of, read_table

WORDS = {"bad": "awful boring stale bad", "good": "great lovely fresh good", "okay": "fine okay average plain"}


def review_table(rows_per_class: int = 60, classes=("bad", "good")) -> pd.DataFrame:
    rows = [
        {"review": f"{WORDS[name]} tea number {i}", "stars": name, "shop": f"shop {i % 3}"}
        for i in range(rows_per_class)
        for name in classes
    ]
    return pd.DataFrame(rows)


def write_table(frame: pd.DataFrame, path: Path) -> Path:
    suffix = path.suffix
    if suffix == ".csv":
        frame.to_csv(path, index=False)
    elif suffix == ".tsv":
        frame.to_csv(path, index=False, sep="\t")
    elif suffix == ".jsonl":
        frame.to_json(path, orient="records", lines=True)
    else:
        frame.to_parquet(path)
    return path


def table_cfg(path, *overrides):
    return compose_cfg(
        "debug=tiny",
        "data=table",
        f"data.path={path}",
        "data.text_column=review",
        "data.label_column=stars",
        *overrides,
    )


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl", ".parquet"])
def test_every_format_reads_the_same_texts_and_labels(tmp_path, suffix):
    frame = review_table(5)
    texts, labels = read_table(write_table(frame, tmp_path / f"t{suffix}"), "review", "stars")
    assert list(texts) == frame["review"].tolist()
    assert labels.tolist() == frame["stars"].tolist()


def test_rows_without_a_text_or_label_are_dropped_with_one_notice(tmp_path):
    frame = review_table(5)
    frame.loc[1, "review"] = None
    frame.loc[4, "stars"] = None
    notices = []
    handler = logging.Handler()
    handler.emit = lambda record: notices.append(record.getMessage())
    logging.getLogger("mha_project.extras.tables.tables").addHandler(handler)
    try:
        texts, labels = read_table(write_table(frame, tmp_path / "t.csv"), "review", "stars")
    finally:
        logging.getLogger("mha_project.extras.tables.tables").removeHandler(handler)
    assert len(texts) == len(labels) == 8
    assert notices == [f"{tmp_path / 't.csv'}: 2 of 10 rows dropped: their text or label is missing"]


def test_integer_labels_are_classes_in_numeric_order(tmp_path):
    frame = pd.DataFrame({"text": [f"word{i} text" for i in range(30)], "label": [10, 2, 1] * 10})
    cfg = compose_cfg("debug=tiny", "data=table", f"data.path={write_table(frame, tmp_path / 't.jsonl')}")
    data = load_splits(cfg.data, cfg.seed)
    assert data.class_names == ["1", "2", "10"]


def test_labels_that_are_one_number_spelled_differently_are_one_class(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("text,label\n" + "".join(f"text {i},{('1', '1.0', '01', '2', '2.00')[i % 5]}\n" for i in range(20)))
    _, labels = read_table(path, "text", "label")
    assert class_names_of(labels) == ["1", "2"]
    path.write_text("text,label\n" + "".join(f"text {i},{('1', '1.50', 'good')[i % 3]}\n" for i in range(9)))
    _, labels = read_table(path, "text", "label")  # not every label a number: each as the file spells it
    assert class_names_of(labels) == ["1", "1.50", "good"]


@pytest.mark.slow
def test_the_test_split_is_a_seeded_stratified_share_or_a_second_file(tmp_path):
    frame = review_table(50, classes=("bad", "good", "okay"))
    frame = frame[~((frame.stars == "okay") & (frame.index % 2 == 0))]  # unbalanced: 50 / 50 / 25
    path = write_table(frame, tmp_path / "t.csv")
    cfg = table_cfg(path, "data.limit=null", "data.test_fraction=0.2")
    data = load_splits(cfg.data, cfg.seed)
    assert np.bincount(data.test_labels).tolist() == [10, 10, 5]  # 20% of each class
    assert len(data.train_texts) + len(data.val_texts) + len(data.test_texts) == len(frame)
    assert not set(data.test_texts) & (set(data.train_texts) | set(data.val_texts))
    again = load_splits(cfg.data, cfg.seed)
    assert list(again.test_texts) == list(data.test_texts)  # evaluate.py re-reads the same split
    other = load_splits(cfg.data, cfg.seed + 1)
    assert list(other.test_texts) != list(data.test_texts)

    test_file = write_table(review_table(4), tmp_path / "test.parquet")
    split = load_splits(table_cfg(path, "data.limit=null", f"data.test_path={test_file}").data, 0)
    assert list(split.test_texts) and set(split.test_texts) == set(review_table(4)["review"])
    assert len(split.train_texts) + len(split.val_texts) == len(frame)
    with pytest.raises(ConfigError, match="has label 'okay', which data.path=.* never has"):
        load_splits(table_cfg(test_file, f"data.test_path={path}").data, 0)


@pytest.mark.parametrize(
    "change, message",
    [
        (["data.path=null"], "data=table needs data.path=FILE"),
        (
            ["data.path={tmp}/t.xlsx"],
            r"data.path=.*t.xlsx is not a table this project reads: its extension must be one of",
        ),
        (["data.path={tmp}/absent.csv"], "data.path=.*absent.csv does not exist or is not a file"),
        (["data.test_fraction=null"], "needs data.test_path=FILE or data.test_fraction"),
        (
            ["data.test_fraction=1.5"],
            r"data.test_fraction=1.5 \(data.test_fraction\) is invalid|data.test_fraction=1.5 is invalid",
        ),
    ],
)
def test_bad_table_settings_are_one_line_before_anything_loads(tmp_path, change, message):
    path = write_table(review_table(5), tmp_path / "t.csv")
    cfg = table_cfg(path, *[c.format(tmp=tmp_path) for c in change])
    with pytest.raises(ConfigError, match=message) as err:
        validate_config(cfg)
    assert "\n" not in str(err.value)


def test_bad_table_contents_are_one_line(tmp_path, monkeypatch):
    path = write_table(review_table(5), tmp_path / "t.csv")
    with pytest.raises(ConfigError, match=r"has no column 'text' \(its columns: review, stars, shop\)"):
        read_table(path, "text", "stars")
    (tmp_path / "empty.csv").write_text("review,stars\n")
    with pytest.raises(ConfigError, match="has no rows with both a text and a label"):
        read_table(tmp_path / "empty.csv", "review", "stars")
    (tmp_path / "bad.jsonl").write_text('{"review": "ok", "stars": "good"}\n{not json\n')
    with pytest.raises(ConfigError, match="cannot be read as JSONL"):
        read_table(tmp_path / "bad.jsonl", "review", "stars")
    parquet = write_table(review_table(5), tmp_path / "t.parquet")
    monkeypatch.setitem(__import__("sys").modules, "pyarrow.parquet", None)  # as if pyarrow were not installed
    with pytest.raises(ConfigError, match=r'Parquet needs pyarrow: pip install -e "\.\[table\]"'):
        read_table(parquet, "review", "stars")


def test_a_table_of_one_class_is_refused_in_one_line(tmp_path):
    frame = review_table(5)
    frame["stars"] = "great"
    with pytest.raises(ConfigError, match="every training label is 'great'; a classifier needs at least two") as err:
        load_splits(table_cfg(write_table(frame, tmp_path / "t.csv")).data, 0)
    assert "\n" not in str(err.value)
    # 1 and "1" in JSON lines are one class, "1": refused too.
    rows = [{"review": f"text {i}", "stars": 1 if i % 2 else "1"} for i in range(20)]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(ConfigError, match="every training label is '1'"):
        load_splits(table_cfg(tmp_path / "t.jsonl").data, 0)


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_the_label_format_is_decided_once_for_the_whole_file(tmp_path, monkeypatch, suffix):
    import mha_project.extras.tables.tables as tables

    monkeypatch.setattr(tables, "CHUNK_ROWS", 4)  # the first chunks hold whole numbers only
    frame = pd.DataFrame({"review": [f"text {i}" for i in range(12)], "stars": [1.0, 2.0] * 5 + [1.5, 2.0]})
    _, labels = read_table(write_table(frame, tmp_path / f"t{suffix}"), "review", "stars")
    assert sorted(set(labels.tolist())) == ["1.0", "1.5", "2.0"]
    frame["stars"] = [1.0, 2.0] * 6  # every label whole: integer names
    _, labels = read_table(write_table(frame, tmp_path / f"u{suffix}"), "review", "stars")
    assert sorted(set(labels.tolist())) == ["1", "2"]


def test_a_text_column_of_lists_the_label_as_text_and_the_training_file_as_test_are_refused(tmp_path):
    frame = review_table(5)
    frame["words"] = [text.split() for text in frame["review"]]
    path = write_table(frame, tmp_path / "t.parquet")
    with pytest.raises(ConfigError, match="column 'words' holds ndarray values such as .*not texts"):
        read_table(path, "words", "stars")
    with pytest.raises(ConfigError, match="data.text_column=stars is data.label_column too"):
        load_splits(table_cfg(path, "data.text_column=stars").data, 0)
    (tmp_path / "same.parquet").symlink_to(path)
    with pytest.raises(ConfigError, match=r"data.test_path=.*same.parquet is data.path: the test would score"):
        load_splits(table_cfg(path, f"data.test_path={tmp_path / 'same.parquet'}").data, 0)


@pytest.fixture(scope="module")
def table_run(tmp_path_factory):
    """One tiny run on a CSV: the masked-LM stage on its texts, the TensorBoard probes and the head view."""
    root = tmp_path_factory.mktemp("table_run")
    path = write_table(review_table(100), root / "reviews.csv")
    run_dir = root / "run"
    result = train_tiny(
        run_dir,
        "data=table",
        f"data.path={path}",
        "data.text_column=review",
        "data.label_column=stars",
        "pretrain=mlm",
        "pretrain.epochs=1",
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return run_dir, path


@pytest.mark.slow
def test_a_table_run_pretrains_logs_probes_draws_the_head_view_and_evaluates(table_run):
    run_dir, _ = table_run
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["class_names"] == ["bad", "good"] and metrics["dataset"] == "table"
    assert (run_dir / "pretrain" / "model.keras").is_file()
    assert "great" in (run_dir / "attention.html").read_text()  # probes are validation rows of the table
    assert {"attention/layer_0", "attention_weights/probe_0/weights/0"} <= set(event_records(run_dir / "tensorboard"))
    result = run_script("evaluate.py", str(run_dir))
    assert result.returncode == 0, result.stderr[-2000:]
    assert (
        abs(json.loads(result.stdout[: result.stdout.rindex("}") + 1])["test_accuracy"] - metrics["test_accuracy"])
        < 1e-6
    )


@pytest.mark.slow
def test_predict_writes_every_row_in_order_as_run_predict_and_the_saved_model_say(table_run, tmp_path):
    import tensorflow as tf

    from mha_project.extras.analysis.runs import load_run

    run_dir, path = table_run
    frame = pd.read_csv(path)
    frame.loc[3, "review"] = None  # a row without a text stays, unlabelled
    source = write_table(frame, tmp_path / "in.jsonl")
    result = run_script(
        "predict.py", str(run_dir), str(source), "--out", str(tmp_path / "out.csv"), "--batch-size", "7"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith(f"wrote {len(frame)} rows to {tmp_path / 'out.csv'} (1 without")
    )
    out = pd.read_csv(tmp_path / "out.csv", keep_default_na=False, na_values=[""])
    assert list(out.columns) == ["review", "stars", "shop", "predicted_class", "prob_bad", "prob_good"]
    assert out["shop"].tolist() == frame["shop"].tolist()  # every row, in input order, its columns kept
    assert pd.isna(out.loc[3, "predicted_class"]) and pd.isna(out.loc[3, "prob_bad"])
    kept = out.drop(index=3)
    run = load_run(run_dir)
    expected = run.predict(kept["review"].tolist())
    np.testing.assert_allclose(kept["prob_good"], [p["good"] for p in expected], atol=1e-6)
    exported = tf.saved_model.load(str(run_dir / "export"))  # held: its functions need its variables alive
    served = exported.serve(tf.constant(kept["review"].tolist()))
    np.testing.assert_allclose(kept[["prob_bad", "prob_good"]].to_numpy(), served["scores"].numpy(), atol=1e-5)
    assert kept["predicted_class"].tolist() == [c.decode() for c in served["predicted_class"].numpy()]


@pytest.mark.slow
def test_predict_reads_plain_text_lines_and_writes_json_lines_or_parquet(table_run, tmp_path):
    run_dir, _ = table_run
    (tmp_path / "texts.txt").write_text("great lovely tea\n\nawful stale bad\n")
    result = run_script("predict.py", str(run_dir), str(tmp_path / "texts.txt"), "--out", str(tmp_path / "o.jsonl"))
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert [r["text"] for r in rows] == ["great lovely tea", "", "awful stale bad"]
    assert all(abs(r["prob_bad"] + r["prob_good"] - 1) < 1e-5 for r in rows)
    result = run_script("predict.py", str(run_dir), str(tmp_path / "texts.txt"))  # no --out: CSV on stdout
    assert list(csv.DictReader(result.stdout.splitlines()))[2]["text"] == "awful stale bad"
    (tmp_path / "texts.jsonl").write_text("".join(json.dumps({"text": r["text"]}) + "\n" for r in rows))
    result = run_script(
        "predict.py",
        str(run_dir),
        str(tmp_path / "texts.jsonl"),
        "--text-column",
        "text",
        "--out",
        str(tmp_path / "o.parquet"),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert pd.read_parquet(tmp_path / "o.parquet")["text"].tolist() == [r["text"] for r in rows]


@pytest.mark.slow
def test_predict_refuses_bad_input_in_one_line_and_leaves_no_output(table_run, tmp_path):
    from mha_project.errors import UserError
    from mha_project.extras.analysis.runs import load_run
    from mha_project.extras.predict.predict import predict_file

    run_dir, path = table_run
    (tmp_path / "empty.csv").write_text("review\n")
    (tmp_path / "latin1.txt").write_bytes("good tea\ncaf\xe9 au lait\n".encode("latin-1"))
    out = tmp_path / "never.csv"
    run = load_run(run_dir)
    for source, column, message in (
        (tmp_path / "empty.csv", "review", "has no rows to predict"),
        (tmp_path / "latin1.txt", "text", "line 2 is not UTF-8 text"),
        (path, "body", "has no column 'body' (its columns: review, stars, shop)"),
    ):
        with pytest.raises(UserError) as err:
            predict_file(run, str(source), str(out), column)
        assert message in str(err.value) and "\n" not in str(err.value)
        assert not out.exists() and not list(tmp_path.glob(".never.csv.*"))  # nothing half-written is left
    # The command line: one line on stderr, exit 2 (the last two answered before TensorFlow loads).
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    cases = [
        ((str(run_dir), str(path), "--text-column", "body"), "has no column 'body'"),
        ((str(unfinished), str(path)), "not a run directory"),
        ((str(run_dir), str(path), "--batch-size", "0"), "--batch-size=0 is invalid"),
    ]
    for args, message in cases:
        result = run_script("predict.py", *args, "--out", str(out))
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]
        assert not out.exists()
    with pytest.raises(UserError, match="o.xlsx has no output format"):
        predict_file(run, str(path), str(tmp_path / "o.xlsx"), "review")


@pytest.mark.slow
def test_a_sweep_runs_on_a_table_as_on_any_dataset(tmp_path):
    path = write_table(review_table(60), tmp_path / "reviews.jsonl")
    sweep = tmp_path / "s"
    columns = ["data.text_column=review", "data.label_column=stars"]
    result = run_script(
        "train.py",
        "-m",
        "heads=1,2",
        "debug=tiny",
        *QUIET,
        "data=table",
        f"data.path={path}",
        *columns,
        f"hydra.sweep.dir={sweep}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = [json.loads((sweep / job / "metrics.json").read_text()) for job in ("0", "1")]
    assert [m["hparams"]["heads"] for m in jobs] == [1, 2] and all(m["dataset"] == "table" for m in jobs)
    assert jobs[0]["data_fingerprint"] == jobs[1]["data_fingerprint"]  # the same seeded splits in every job
    # Each line of a job says whose it is (jobs of a parallel launcher share one terminal), Keras's epoch line too;
    # what the job changed for that is put back once it ends.
    log = (sweep / "1" / "train.log").read_text()
    assert "[job 1] test accuracy:" in log and re.search(r"\[job 1\] \d+/\d+ - .* - val_accuracy: ", log), log[-2000:]
    import keras

    assert keras.config.is_interactive_logging_enabled()


@pytest.mark.slow
def test_predict_keeps_every_input_column_of_every_row_and_never_writes_over_its_input(
    table_run, tmp_path, monkeypatch
):
    import mha_project.extras.predict.predict as predict
    from mha_project.errors import UserError
    from mha_project.extras.analysis.runs import load_run

    run_dir, _ = table_run
    run = load_run(run_dir)
    monkeypatch.setattr(predict, "READ_ROWS", 4)  # a key first seen after the first chunk
    rows = [{"review": f"great tea {i}", "id": i} for i in range(10)]
    rows[7]["extra"] = "only here"
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    before = source.read_bytes()
    for out in ("out.jsonl", "out.csv", "out.parquet"):
        predict.predict_file(run, str(source), str(tmp_path / out), "review")
    written = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["extra"] for r in written] == [None] * 7 + ["only here"] + [None] * 2
    assert [r["id"] for r in written] == list(range(10))  # an integer stays an integer
    assert pd.read_csv(tmp_path / "out.csv")["extra"].tolist()[7] == "only here"
    assert pd.read_parquet(tmp_path / "out.parquet")["extra"].tolist()[7] == "only here"
    # --out naming the input (or a link to it), a directory, or a column predict would overwrite: refused
    # before anything is written, the input as it was.
    (tmp_path / "link.jsonl").symlink_to(source)
    (tmp_path / "taken.csv").write_text("review,predicted_class\ngreat tea,mine\n")
    for src, out, message in (
        (source, source, "is the input: the predictions would replace it"),
        (source, tmp_path / "link.jsonl", "is the input"),
        (source, tmp_path, "is a directory: name a file"),
        (tmp_path / "taken.csv", tmp_path / "o.csv", "already has a column 'predicted_class', which predict writes"),
    ):
        with pytest.raises(UserError, match=message) as err:
            predict.predict_file(run, str(src), str(out), "review")
        assert "\n" not in str(err.value)
    assert source.read_bytes() == before and not (tmp_path / "o.csv").exists()


@pytest.mark.slow
def test_predict_writes_one_parquet_schema_and_keeps_a_replaced_files_mode(table_run, tmp_path, monkeypatch):
    import os

    import mha_project.extras.predict.predict as predict
    from mha_project.extras.analysis.runs import load_run

    run_dir, _ = table_run
    run = load_run(run_dir)
    monkeypatch.setattr(predict, "READ_ROWS", 4)
    # A column null in the first chunk and text later; the first chunk's texts all missing.
    rows = [{"review": None if i < 4 else f"lovely tea {i}", "note": None if i < 4 else "n"} for i in range(9)]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "out.parquet"
    out.write_bytes(b"old")
    os.chmod(out, 0o600)
    predict.predict_file(run, str(source), str(out), "review")
    import pyarrow.parquet as pq

    frame = pq.read_table(out).to_pylist()
    assert [row["note"] for row in frame] == [None] * 4 + ["n"] * 5
    assert [row["predicted_class"] is None for row in frame] == [True] * 4 + [False] * 5
    assert oct(os.stat(out).st_mode & 0o777) == oct(0o600)  # the private file stays private
    old_mask = os.umask(0o077)
    try:
        predict.predict_file(run, str(source), str(tmp_path / "new.csv"), "review")
    finally:
        os.umask(old_mask)
    assert oct(os.stat(tmp_path / "new.csv").st_mode & 0o777) == oct(0o600)  # the umask is respected


@pytest.mark.slow
def test_predict_needs_only_the_runs_model_and_vocabulary(table_run, tmp_path):
    import shutil

    run_dir, _ = table_run
    moved = tmp_path / "run"
    shutil.copytree(run_dir, moved)
    config = moved / ".hydra" / "config.yaml"
    config.write_text(config.read_text().replace(str(run_dir.parent / "reviews.csv"), str(tmp_path / "gone.csv")))
    (tmp_path / "texts.txt").write_text("great lovely tea\n")
    result = run_script("predict.py", str(moved), str(tmp_path / "texts.txt"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert list(csv.DictReader(result.stdout.splitlines()))[0]["text"] == "great lovely tea"


@pytest.mark.subprocess
@pytest.mark.slow
def test_predict_stopped_by_sigterm_leaves_no_temporary_file_and_says_so_in_one_line(table_run, tmp_path):
    # A fresh process: a signal to the command is the behaviour under test.
    import os
    import signal
    import subprocess
    import sys
    import time

    from conftest import ROOT

    run_dir, _ = table_run
    source = tmp_path / "many.txt"
    source.write_text("great lovely tea, fresh and good\n" * 400_000)
    out = tmp_path / "out.csv"
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "predict.py"), str(run_dir), str(source), "--out", str(out)],
        cwd=ROOT,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while time.time() < deadline and process.poll() is None and not list(tmp_path.glob(".out.csv.*.tmp")):
        time.sleep(0.05)
    assert process.poll() is None, "predict ended before it could be stopped: " + process.communicate()[1][-2000:]
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=180)
    assert process.returncode == 128 + signal.SIGTERM, err[-2000:]
    lines = err.strip().splitlines()
    assert lines[-1] == f"error: interrupted (SIGTERM); {out} was not written", err[-2000:]
    assert "Traceback" not in err and not [line for line in lines if line.startswith("error: ")][:-1], err[-2000:]
    assert not out.exists() and not list(tmp_path.glob(".out.csv.*"))


@pytest.mark.slow
def test_predict_never_writes_to_its_input_or_a_run_and_refuses_unwritable_outputs(table_run, tmp_path, monkeypatch):
    import os
    import sys

    import mha_project.extras.predict.predict as predict
    from mha_project.errors import UserError
    from mha_project.extras.analysis.runs import load_run

    run_dir, _ = table_run
    run = load_run(run_dir)
    source = tmp_path / "in.csv"
    source.write_text("review\ngreat tea\n")
    os.link(source, tmp_path / "hard.csv")
    (tmp_path / "soft.csv").symlink_to(source)
    readonly = tmp_path / "readonly.csv"
    readonly.write_text("mine\n")
    os.chmod(readonly, 0o444)
    (tmp_path / "a_file").write_text("mine\n")
    history = run_dir / "history.csv"
    record = history.read_bytes()
    with open(source) as stdin:  # the texts arrive on standard input: the file behind it is still the input
        monkeypatch.setattr(sys, "stdin", stdin)
        for out in (source, tmp_path / "hard.csv", tmp_path / "soft.csv"):
            with pytest.raises(UserError, match="is the input: the predictions would replace it"):
                predict.predict_file(run, "-", str(out), "text")
    for out, message in (
        (tmp_path / "hard.csv", "is the input"),
        (readonly, r"is read-only \(mode 0444\)"),
        (history, f"is inside the run directory {run_dir}"),
        (tmp_path / "a_file" / "o.csv", "cannot be written: .*a_file is not a folder"),
    ):
        with pytest.raises(UserError, match=message) as err:
            predict.predict_file(run, str(source), str(out), "review")
        assert "\n" not in str(err.value)
    assert source.read_text() == "review\ngreat tea\n" and readonly.read_text() == "mine\n"
    assert history.read_bytes() == record and not list(tmp_path.glob(".*.tmp"))


@pytest.mark.slow
def test_predict_reads_strings_only_and_writes_values_it_cannot_store_as_one_line(table_run, tmp_path):
    import mha_project.extras.predict.predict as predict
    from mha_project.errors import UserError
    from mha_project.extras.analysis.runs import load_run

    run = load_run(table_run[0])
    source = tmp_path / "in.jsonl"
    for bad, shown in (({"a": 1}, 'dict {"a": 1}'), ([1, 2], "list [1, 2]"), (7, "int 7")):
        source.write_text(json.dumps({"review": "great tea"}) + "\n" + json.dumps({"review": bad}) + "\n")
        with pytest.raises(UserError, match=f"row 2, column 'review' holds {re.escape(shown)}, not text"):
            predict.predict_file(run, str(source), str(tmp_path / "o.csv"), "review")
    # A nested value of another column is written as JSON, not as Python's repr.
    source.write_text(json.dumps({"review": "great tea", "meta": {"shop": "a", "tags": [1, 2]}}) + "\n")
    predict.predict_file(run, str(source), str(tmp_path / "o.csv"), "review")
    meta = next(csv.DictReader((tmp_path / "o.csv").open()))["meta"]
    assert json.loads(meta) == {"shop": "a", "tags": [1, 2]}
    # An integer beyond Parquet's int64: refused naming its row and column, nothing written.
    source.write_text("".join(json.dumps({"review": "tea", "n": n}) + "\n" for n in (1, 2, 10**20)))
    with pytest.raises(UserError, match=r"row 3, column 'n': 100000000000000000000 does not fit Parquet's int64"):
        predict.predict_file(run, str(source), str(tmp_path / "o.parquet"), "review")
    assert not (tmp_path / "o.parquet").exists() and not list(tmp_path.glob(".*.tmp"))


@pytest.mark.subprocess
@pytest.mark.slow
def test_predict_stops_at_once_on_sigterm_while_starting_or_waiting_on_standard_input(table_run, tmp_path):
    # A fresh process: a signal to the command is the behaviour under test.
    import os
    import signal
    import subprocess
    import sys
    import time

    from conftest import ROOT

    command = [sys.executable, str(ROOT / "scripts" / "predict.py"), str(table_run[0]), "-", "--out", "o.csv"]
    for wait_for in ("start-up", "standard input"):
        process = subprocess.Popen(
            command, cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        if wait_for == "start-up":  # once its handler is set (/proc's SigCgt), while TensorFlow still loads
            status = Path(f"/proc/{process.pid}/status")
            term = 1 << (signal.SIGTERM - 1)
            caught = poll(lambda s=status: _caught(s.read_text()), ready=lambda mask, t=term: mask & t, seconds=60)
            assert caught & term, status.read_text()
        else:  # until the model is loaded and the command waits for its first line
            waiting = Path(f"/proc/{process.pid}/wchan")
            assert poll(lambda p=process, w=waiting: p.poll() is not None or "pipe" in w.read_text(), seconds=120)
        assert process.poll() is None, process.communicate()[1][-2000:]
        process.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        _, err = process.communicate(timeout=60)
        assert time.monotonic() - stopped < 5, (wait_for, err[-2000:])
        assert process.returncode == 128 + signal.SIGTERM, err[-2000:]
        assert err.strip().splitlines()[-1] == "error: interrupted (SIGTERM); o.csv was not written", err[-2000:]
        assert "Traceback" not in err and os.listdir(tmp_path) == [], (wait_for, err[-2000:])


def _caught(status: str) -> int:
    """The signals a process has handlers for: /proc/PID/status's SigCgt mask (bit N-1 for signal N)."""
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
