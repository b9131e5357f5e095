"""The predict extra."""
