"""``export/``: the run's SavedModel beside ``model.keras``, which takes raw strings and returns class probabilities and
names (``export.py``), for TF Serving or ``tf.saved_model.load``; written by a Hydra callback when a run finishes
(``callback.py``; ``savedmodel.export=false``: none)."""
