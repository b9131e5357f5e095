"""What each attention head of a finished run does (``scripts/head_patterns.py``: entropy, positional mass, a
label per head, and on rule-built data the head that follows each relation) and which heads matter
(``scripts/head_importance.py``: accuracy with each head masked out)."""
