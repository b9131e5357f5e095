"""The timing extra."""
