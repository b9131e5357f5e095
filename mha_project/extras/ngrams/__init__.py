"""The ngrams extra."""
