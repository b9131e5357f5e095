"""The distribution extra."""
