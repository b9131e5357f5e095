"""TensorBoard's HParams dashboard (``dashboard.py``): each run a session (its hyper-parameters when its fit
starts: ``SessionStart``, a Keras callback in the ``callbacks:`` group; its status and final metrics when it ends:
``callback.py``, a Hydra callback), each sweep one experiment config with its swept keys marked. On by default
(``hparams=default``; ``hparams=none``: off)."""
