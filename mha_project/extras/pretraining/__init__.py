"""The pretraining extra."""
