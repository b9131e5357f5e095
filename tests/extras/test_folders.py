"""data=folder: a user's texts in the aclImdb layout (DIR/train/<class>/*.txt), left on disk and read as
Keras's text_dataset_from_directory reads them; the checks a folder must pass."""

import logging
import os
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_clean_failure, compose_cfg, load_splits, run_script, write_folder_dataset
from mha_project.data.pipeline import TextPreprocessor, make_pipeline
from mha_project.data.texts import concat_texts, text_dataset
from mha_project.data.vocabulary import make_vectorizer
from mha_project.errors import ConfigError
from mha_project.extras.folders.texts import TextFiles, index_text_files, load_unlabeled


def data_cfg(name="folder", **kw):
    return compose_cfg(f"data={name}", *(f"data.{k}={v}" for k, v in kw.items())).data


def test_folder_dataset_ignores_unsup(tmp_path):
    root = write_folder_dataset(tmp_path / "ds", per_class=10)
    d = load_splits(data_cfg(name="folder", path=str(root), val_fraction=0.2), seed=0)
    assert d.class_names == ["neg", "pos"]
    assert len(d.train_texts) + len(d.val_texts) == 20 and len(d.test_texts) == 20
    for text, label in zip(d.test_texts, d.test_labels):
        assert ("great" in text) == (label == 1)
    assert not any("no label here" in t for t in d.train_texts + d.val_texts)


def test_folder_dataset_with_disjoint_classes_is_refused(tmp_path):
    root = write_folder_dataset(tmp_path / "ds", classes=("neg", "pos"), per_class=2, extra_train=())
    (root / "test" / "neg").rename(root / "test" / "bad")
    (root / "test" / "pos").rename(root / "test" / "good")
    with pytest.raises(ConfigError, match="at least 2 class folders present in both"):
        load_splits(data_cfg(name="folder", path=str(root)), seed=0)


def test_folder_ignores_hidden_folders_reads_upper_case_txt_and_names_a_test_only_class(tmp_path):
    root = write_folder_dataset(tmp_path / "d", per_class=6)
    for split in ("train", "test"):
        (root / split / ".ipynb_checkpoints").mkdir()
        (root / split / ".ipynb_checkpoints" / "x.txt").write_text("checkpoint copy")
    (root / "train" / "pos" / "LOUD.TXT").write_text("great great")
    (root / "test" / "mid").mkdir()
    (root / "test" / "mid" / "0.txt").write_text("fine okay")
    records = []
    warned = logging.Handler()
    warned.emit = records.append
    logging.getLogger("mha_project.extras.folders.layout").addHandler(warned)
    try:
        d = load_splits(data_cfg(name="folder", path=str(root), val_fraction=0.25), seed=0)
    finally:
        logging.getLogger("mha_project.extras.folders.layout").removeHandler(warned)
    assert d.class_names == ["neg", "pos"]
    assert len(d.train_texts) + len(d.val_texts) == 13  # 6 + 6 + LOUD.TXT
    assert ["test/mid has no train/ twin and is ignored" in r.getMessage() for r in records] == [True]  # a warning


def test_folder_with_an_unreadable_file_names_the_split(tmp_path):
    root = write_folder_dataset(tmp_path / "d", per_class=4)
    (root / "train" / "pos" / "broken.txt").symlink_to(tmp_path / "nowhere.txt")  # unreadable even for root
    with pytest.raises(ConfigError, match=r"train/ cannot be read"):
        load_splits(data_cfg(name="folder", path=str(root)), seed=0)


@pytest.mark.slow
def test_folder_texts_stay_on_disk_and_batch_exactly_as_texts_in_memory(tmp_path):
    import keras

    root = write_folder_dataset(tmp_path / "d", per_class=15)
    (root / "train" / "pos" / "accents.txt").write_bytes("café crème brûlée great\n".encode())
    (root / "train" / "neg" / "bad_bytes.txt").write_bytes(b"awful \xff\xfe coffee")  # not UTF-8
    (root / "train" / "neg" / "more").mkdir()  # Keras walks subfolders too
    (root / "train" / "neg" / "more" / "Nested.TXT").write_text("nested awful")
    d = load_splits(data_cfg(name="folder", path=str(root)), seed=0)
    assert isinstance(d.train_texts, TextFiles)  # paths, not texts, are held
    # Same file order as Keras's text_dataset_from_directory (so the seeded split is unchanged).
    keras_ds = keras.utils.text_dataset_from_directory(
        root / "train", class_names=d.class_names, batch_size=None, shuffle=False, verbose=False
    )
    in_memory = [t.decode("utf-8", errors="replace") for t, _ in keras_ds.as_numpy_iterator()]
    paths, labels = index_text_files(root / "train", d.class_names)
    read = [Path(path).read_bytes().decode("utf-8", errors="replace") for path in paths]
    assert read == in_memory and labels == [int(y) for _, y in keras_ds.as_numpy_iterator()]  # the same order
    listed = load_splits(data_cfg(name="folder", path=str(root), val_fraction=0.5), seed=0)
    assert sorted(listed.train_texts + listed.val_texts) == sorted(in_memory)
    # The pipeline reading files gives the same batches as the same texts held in memory.
    vec = make_vectorizer(list(d.train_texts), vocab_size=50)
    from_files = make_pipeline(d.train_texts, d.train_labels, TextPreprocessor(vec, 16), 4, shuffle=False, seed=0)
    from_memory = make_pipeline(
        list(d.train_texts), d.train_labels, TextPreprocessor(vec, 16), 4, shuffle=False, seed=0
    )
    for (ids_f, y_f), (ids_m, y_m) in zip(from_files, from_memory, strict=True):
        np.testing.assert_array_equal(ids_f.numpy(), ids_m.numpy())
        np.testing.assert_array_equal(y_f.numpy(), y_m.numpy())
    assert make_vectorizer(d.train_texts, 50).get_vocabulary() == vec.get_vocabulary()


def folder_cases(tmp_path: Path):
    missing = tmp_path / "does_not_exist"
    no_splits = tmp_path / "no_splits"
    no_splits.mkdir()
    differ = write_folder_dataset(tmp_path / "differ", per_class=2, extra_train=())
    (differ / "test" / "pos").rename(differ / "test" / "good")
    (differ / "test" / "neg").rename(differ / "test" / "bad")
    one_class = write_folder_dataset(tmp_path / "one", classes=("pos",), per_class=2, extra_train=())
    empty = write_folder_dataset(tmp_path / "empty", per_class=2, extra_train=())
    for f in (empty / "test").rglob("*.txt"):
        f.unlink()
    # A class without files in one split is refused (it would train on one class: val 1.0, test 0.5) ...
    one_empty_class = write_folder_dataset(tmp_path / "one_empty_class", per_class=2, extra_train=())
    for f in (one_empty_class / "test" / "pos").glob("*.txt"):
        f.unlink()
    # ... every text empty (TextVectorization's table was never initialised) ...
    blank = write_folder_dataset(tmp_path / "blank", per_class=4, extra_train=())
    for f in blank.rglob("*.txt"):
        f.write_text("")
    # ... a FIFO named *.txt (the run hung forever) and a link loop.
    fifo = write_folder_dataset(tmp_path / "fifo", per_class=4, extra_train=())
    os.mkfifo(fifo / "train" / "pos" / "pipe.txt")
    loop = write_folder_dataset(tmp_path / "loop", per_class=4, extra_train=())
    (loop / "train" / "neg" / "loop.txt").symlink_to(loop / "train" / "neg" / "loop.txt")
    return [
        (missing, "does not exist"),
        (no_splits, "has no train/ or test/ folder"),
        (differ, "need at least 2 class folders present in both"),
        (one_class, "need at least 2 class folders"),
        (empty, "test/neg has no .txt files"),
        (one_empty_class, "test/pos has no .txt files: every class needs texts in both"),
        (blank, "have no words (every one is empty or punctuation only)"),
        (fifo, "pipe.txt is not a readable file"),
        (loop, "loop.txt is not a readable file"),
    ]


@pytest.mark.slow
def test_a_folder_dataset_without_its_path_is_one_line(tmp_path):
    assert_clean_failure(run_script("train.py", "data=folder", f"hydra.run.dir={tmp_path / 'run'}"), "data.path")


@pytest.mark.slow
def test_bad_folders(tmp_path):
    for path, needle in folder_cases(tmp_path):
        result = run_script("train.py", "data=folder", f"data.path={path}", f"hydra.run.dir={tmp_path / 'run'}")
        assert_clean_failure(result, needle, str(path))


def test_unlabeled_texts_of_a_folder_dataset(tmp_path):
    root = write_folder_dataset(tmp_path / "d")
    (root / "train" / "unsup" / "1.TXT").write_text("more words")
    texts = load_unlabeled(compose_cfg("data=folder", f"data.path={root}").data)
    assert isinstance(texts, TextFiles) and sorted(texts) == ["more words", "no label here"]
    both = concat_texts(TextFiles([root / "train" / "neg" / "0_train.txt"]), texts)
    streamed = [t.decode() for t in text_dataset(both).as_numpy_iterator()]
    assert len(both) == 3 and streamed == [(root / "train" / "neg" / "0_train.txt").read_text(), *texts]
    (root / "train" / "unsup" / "0.txt").unlink()
    (root / "train" / "unsup" / "1.TXT").unlink()
    with pytest.raises(ConfigError, match="has no train/unsup"):
        load_unlabeled(compose_cfg("data=folder", f"data.path={root}").data)
