"""Text data: where texts come from (``sources.py``), the vocabulary and text -> ids (``vocabulary.py``,
``pipeline.py``), texts kept in lists or on disk (``texts.py``)."""
