"""The head_view extra."""
