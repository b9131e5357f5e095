"""The head_analysis extra."""
