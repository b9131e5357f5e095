"""``data=relations``: seeded tasks whose label is a relation between words (``tasks.py``: ``RelationsData``, the
``_target_`` of ``configs/data/relations.yaml``), instantly available offline, on which a bag of words stays at
chance and attention does not; the rule's positions let head_patterns.py name the head that follows each
relation. docs/seed_advice.md ("Where more heads are needed") has the measurements."""
