"""The optuna extra."""
