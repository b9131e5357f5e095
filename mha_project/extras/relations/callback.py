"""``callbacks.head_patching`` (on with ``data=relations``): activation patching of every head every few
training steps, so TensorBoard shows when the head that does the work forms (one line per head): a phase
change can happen inside one epoch."""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from mha_project.data.vocabulary import ragged_ids, read_vocabulary, saved_vectorizer
from mha_project.extras.head_analysis.patching import head_patching
from mha_project.extras.relations.tasks import patching_pairs
from mha_project.run_dir import ANALYSIS_TB, VOCAB_FILE

# In log-probability units: below it, clean and corrupted runs score the pairs alike (a model at chance).
MIN_GAP = 0.5


class PatchingDuringTraining(keras.callbacks.Callback):
    """``head_patching/training/layer_<l>/head_<h>``: the share of the clean answer head ``h`` of layer ``l``
    restores on ``pairs`` clean/corrupted pairs of ``task`` (:func:`~mha_project.extras.relations.tasks.flipped`),
    every ``every_steps`` optimizer steps, written into ``RUN_DIR/tensorboard/analysis`` at that step (the analysis
    run the Attention tab reads), from the first time the model tells the clean texts from their twins
    (:data:`MIN_GAP`)."""

    def __init__(self, task: str, seed: int, run_dir: str, pairs: int = 64, every_steps: int = 100):
        super().__init__()
        self.task, self.seed, self.run_dir, self.pairs = task, seed, Path(run_dir), pairs
        self.every_steps = every_steps

    def on_train_begin(self, logs=None):
        # The run's own ids: vocab.txt is written before the fit (a rule's texts are never truncated).
        path = self.run_dir / VOCAB_FILE
        vectorizer = saved_vectorizer(path, len(read_vocabulary(path)) + 2)  # + padding and [UNK]
        clean, corrupted, self.labels, _ = patching_pairs(self.task, self.pairs, self.seed)
        encoded = ragged_ids(vectorizer, clean + corrupted).to_tensor().numpy()
        self.clean, self.corrupted = encoded[: self.pairs], encoded[self.pairs :]
        self.writer = tf.summary.create_file_writer(str(self.run_dir / "tensorboard" / ANALYSIS_TB))

    def on_train_batch_end(self, batch, logs=None):
        # The optimizer's count, not the batch index: it goes on across epochs and a resumed run.
        step = int(self.model.optimizer.iterations.numpy())
        if step % self.every_steps:
            return
        result = head_patching(self.model, self.clean, self.corrupted, self.labels)
        if result["clean_metric"] - result["corrupted_metric"] < MIN_GAP:
            return  # the model does not tell a text from its twin yet: a share of nothing is noise, not a point
        with self.writer.as_default(step=step):
            for (layer, head), value in np.ndenumerate(result["recovered"]):
                if not np.isnan(value):
                    tf.summary.scalar(f"head_patching/training/layer_{layer}/head_{head}", value)
        self.writer.flush()

    def on_train_end(self, logs=None):
        self.writer.close()
