"""data=imdb and data=ag_news through TensorFlow Datasets, on TFDS's mock data: no download."""

import json

import numpy as np
import pytest
import tensorflow_datasets as tfds

from conftest import assert_clean_failure, compose_cfg, load_splits, run_script
from mha_project.data.pipeline import TextPreprocessor, make_pipeline
from mha_project.data.texts import ChainedTexts, concat_texts, text_dataset
from mha_project.data.vocabulary import make_vectorizer
from mha_project.errors import ConfigError
from mha_project.extras.tfds import texts as tfds_texts
from mha_project.extras.tfds.texts import TfdsTexts, load_unlabeled


def data_cfg(name, **kw):
    return compose_cfg(f"data={name}", *(f"data.{k}={v}" for k, v in kw.items())).data


@pytest.mark.slow
@pytest.mark.parametrize("name,tfds_name,num_classes", [("imdb", "imdb_reviews", 2), ("ag_news", "ag_news_subset", 4)])
def test_tfds_loaders_with_mock_data(monkeypatch, name, tfds_name, num_classes):
    monkeypatch.setattr(tfds_texts, "check_download_possible", lambda *a, **k: None)
    with tfds.testing.mock_data(num_examples=30):
        d = load_splits(data_cfg(name=name, tfds_name=tfds_name, val_fraction=0.2), seed=0)
        assert d.num_classes == num_classes
        assert len(d.train_texts) == 24 and len(d.val_texts) == 6 and len(d.test_texts) == 30
        assert all(isinstance(t, str) for t in d.train_texts)
    assert set(np.unique(d.train_labels)) <= set(range(num_classes))


@pytest.mark.slow
def test_tfds_texts_stay_in_tfds_and_batch_exactly_as_texts_in_memory(monkeypatch):
    monkeypatch.setattr(tfds_texts, "check_download_possible", lambda *a, **k: None)
    with tfds.testing.mock_data(num_examples=40):
        d = load_splits(data_cfg(name="imdb", tfds_name="imdb_reviews", val_fraction=0.25, limit=20), seed=3)
        # Positions, not texts, are held; the seeded choice is unchanged, in file order.
        assert isinstance(d.train_texts, TfdsTexts) and d.train_texts.indices.dtype == np.int64
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
        streamed = make_pipeline(d.train_texts, d.train_labels, TextPreprocessor(vec, 16), 4, shuffle=False, seed=0)
        in_memory = make_pipeline(texts, d.train_labels, TextPreprocessor(vec, 16), 4, shuffle=False, seed=0)
        for (ids_s, y_s), (ids_m, y_m) in zip(streamed, in_memory, strict=True):
            np.testing.assert_array_equal(ids_s.numpy(), ids_m.numpy())
            np.testing.assert_array_equal(y_s.numpy(), y_m.numpy())
        assert make_vectorizer(d.train_texts, 50).get_vocabulary() == vec.get_vocabulary()
        # Training + unlabeled texts for pretraining: still streamed, in order.
        unlabeled = load_unlabeled(data_cfg(name="imdb"))
        both = concat_texts(d.train_texts, unlabeled)
        assert isinstance(both, ChainedTexts) and len(both) == 20 + 40
        streamed_texts = [t.decode() for t in text_dataset(both).as_numpy_iterator()]
        assert streamed_texts == texts + list(unlabeled)
    with pytest.raises(ValueError, match="indices must ascend"):
        TfdsTexts("imdb_reviews", "train", None, 10, indices=[3, 1])


def test_tfds_offline_fails_fast_with_offline_options(monkeypatch, tmp_path):
    def unreachable(host_port, timeout):
        raise OSError(-2, "Name or service not known")

    monkeypatch.setattr(tfds_texts.socket, "create_connection", unreachable)
    with pytest.raises(ConfigError) as err:
        load_splits(data_cfg(name="imdb", tfds_name="imdb_reviews", data_dir=str(tmp_path)), seed=0)
    message = str(err.value)
    assert "cannot download" in message and "data=fine_foods" in message and "data.data_dir" in message


@pytest.mark.slow
def test_tfds_offline_is_answered_in_seconds_and_the_run_dir_says_why_it_failed(tmp_path):
    run_dir = tmp_path / "run"
    result = run_script("train.py", "data=imdb", f"data.data_dir={tmp_path / 'tfds'}", f"hydra.run.dir={run_dir}")
    assert_clean_failure(result, "data=imdb", "data=fine_foods", "data=folder", "data.data_dir")
    assert "[absl]" not in result.stdout  # TFDS's log lines before the error are not the news
    # The half-made directory's record says why it failed (the tools do not call it "not a run directory").
    failure = json.loads((run_dir / "failure.json").read_text())
    assert failure["status"] == "failed" and failure["stage"] == "started" and "data=imdb" in failure["reason"]
    for script, *extra in (("evaluate.py",), ("inspect_attention.py", "great tea")):
        told = run_script(script, str(run_dir), *extra)
        assert told.returncode == 2 and f"{run_dir} is a run that failed before it finished: data=imdb" in told.stderr
