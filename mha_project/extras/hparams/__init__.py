"""The hparams extra."""
