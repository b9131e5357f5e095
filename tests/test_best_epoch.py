"""Which epoch a run keeps and tests: the one ``trainer.monitor`` prefers (val_accuracy highest, val_loss lowest),
on disk (BestWeights) and in the record (best_row, as trained_results reads history.csv)."""

import keras
import numpy as np
import pytest

from mha_project.training.fit import BestWeights, best_of, best_row, monitor_mode

# Three epochs: accuracy peaks at the second, loss is lowest at the third.
EPOCHS = [
    {"loss": 1.0, "val_accuracy": 0.5, "val_loss": 0.9},
    {"loss": 0.8, "val_accuracy": 0.7, "val_loss": 1.1},
    {"loss": 0.6, "val_accuracy": 0.6, "val_loss": 0.7},
]


def one_weight_model():
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1, use_bias=False)])
    return model, model.layers[0].kernel


@pytest.mark.parametrize("monitor, kept", [("val_accuracy", 2), ("val_loss", 3)])
def test_the_epoch_kept_is_the_one_the_monitor_prefers(tmp_path, monitor, kept):
    model, kernel = one_weight_model()
    path = tmp_path / "best.weights.h5"
    callback = BestWeights(path, monitor, monitor_mode(monitor))
    callback.set_model(model)
    for epoch, logs in enumerate(EPOCHS):
        kernel.assign([[float(epoch + 1)]])  # the weights say which epoch they are
        callback.on_epoch_end(epoch, logs)
    assert callback.best_epoch == kept
    model.load_weights(path)
    assert float(np.asarray(kernel)[0, 0]) == kept
    rows = [{"epoch": str(i + 1), **{k: str(v) for k, v in logs.items()}} for i, logs in enumerate(EPOCHS)]
    assert best_row(rows, monitor) == kept  # what the record says was tested


def test_a_resumed_fit_keeps_an_epoch_only_if_it_beats_those_before_the_kill(tmp_path):
    model, kernel = one_weight_model()
    path = tmp_path / "best.weights.h5"
    previous = [{"val_loss": "0.7"}, {"val_loss": "0.9"}]
    callback = BestWeights(path, "val_loss", "min", initial_best=best_of(previous, "val_loss"))
    callback.set_model(model)
    callback.on_epoch_end(2, {"loss": 0.5, "val_loss": 0.8})
    assert callback.best_epoch is None and not path.exists()  # 0.8 is no better than epoch 1's 0.7
    callback.on_epoch_end(3, {"loss": 0.4, "val_loss": 0.6})
    assert callback.best_epoch == 4 and path.exists()
