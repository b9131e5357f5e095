import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import TINY, compose_cfg
from mha_project.data.pipeline import pipeline_from_token_ids
from mha_project.training.schedules import WarmupCosine, warmup_cosine
from mha_project.training.train import build_model, compile_model


@pytest.mark.parametrize(
    "lr, warmup_fraction, total_steps", [(0.005, 0.1, 1000), (0.003, 0.0, 37), (1e-3, 0.05, 351), (0.006, 0.02, 176)]
)
def test_warmup_cosine_has_keras_cosine_decay_values(lr, warmup_fraction, total_steps):
    """The same curve as Keras's CosineDecay with a warm-up (what runs trained with before), without ops.cond."""
    warmup = int(warmup_fraction * total_steps)
    reference = keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=0.0 if warmup else lr,
        decay_steps=total_steps - warmup,
        warmup_target=lr if warmup else None,
        warmup_steps=warmup,
    )
    steps = np.arange(total_steps + 10)
    # ops.where: all steps at once (float32 vector ops: rounding differs from one step's in the 7th digit)
    ours = np.asarray(warmup_cosine(lr, warmup_fraction, total_steps)(steps))
    # its ops.cond takes one step at a time: tf.map_fn steps through them all in one traced call
    step_by_step = tf.function(lambda steps: tf.map_fn(reference, steps, fn_output_signature=tf.float32))
    np.testing.assert_allclose(ours, step_by_step(tf.constant(steps)), rtol=1e-5, atol=1e-9 * lr)
    assert ours[total_steps] == 0.0 and ours.max() == pytest.approx(lr)


def test_warmup_cosine_round_trips_through_keras_serialization():
    schedule = WarmupCosine(peak=0.01, warmup_steps=5, decay_steps=50)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert isinstance(restored, WarmupCosine) and restored.get_config() == schedule.get_config()


@pytest.mark.slow
def test_the_train_step_is_traced_once_across_fits_and_shapes():
    """Keras creates the optimizer's and metrics' variables inside the first traced step unless they
    exist already, and tf.function then traces the whole step a second time (seconds on a CPU)."""
    cfg = compose_cfg(*TINY, "embed_dim=8", "key_dim=4", "dropout=0.1", "lr=1e-3")
    model = build_model(cfg, vocab_size=50, num_classes=3)
    compile_model(model, cfg, total_steps=20)
    traces = []
    step = model.train_step
    model.train_step = lambda data: traces.append(1) or step(data)
    rng = np.random.default_rng(0)
    for fit in range(2):  # two fits, as the benchmark's rounds; batches of lengths 16 and 32 (buckets)
        rows = [rng.integers(2, 50, size=n).astype("int32") for n in rng.integers(3, 30, size=24)]
        ds = pipeline_from_token_ids(rows, rng.integers(0, 3, 24), 32, 4, shuffle=True, seed=fit)
        history = model.fit(ds, epochs=1, verbose=0)
    assert len(traces) == 1
    assert model.optimizer.iterations.numpy() >= 12  # it did train: 24 texts in batches of 4, twice
    assert 0.0 <= history.history["accuracy"][0] <= 1.0 and np.isfinite(history.history["loss"][0])


def epoch_learning_rates(run_dir) -> list[float]:
    """The learning rate Keras's TensorBoard callback recorded at the end of each epoch."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard" / "train"), size_guidance={"tensors": 0})
    events.Reload()
    return [float(tf_tensor_value(e)) for e in events.Tensors("epoch_learning_rate")]


def tf_tensor_value(event):
    return tf.make_ndarray(event.tensor_proto)


@pytest.mark.slow
def test_schedule_ends_at_zero_when_training_ends_at_long_seq_len(tmp_path):
    # The schedule is sized from the pipeline's real batch count (bucketed batches included), so at a long
    # seq_len the rate still reaches 0 at the last step rather than ending near its peak.
    from conftest import QUIET
    from mha_project.training.train import train

    cfg = compose_cfg(*TINY, *QUIET, "seq_len=4096", "epochs=3", "trainer.early_stopping_patience=10")
    train(cfg, tmp_path / "run")
    rates = epoch_learning_rates(tmp_path / "run")
    assert len(rates) == 3
    assert rates[-1] < 1e-6 * cfg.trainer.lr, rates  # the cosine reached 0 at the last step
