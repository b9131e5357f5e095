"""``data=folder data.path=DIR``: a user's own texts in the aclImdb layout, DIR/train/<class>/*.txt and
DIR/test/<class>/*.txt (``texts.py``: ``FolderData``, the ``_target_`` of ``configs/data/folder.yaml``), with the
checks a folder must pass before anything runs (``layout.py``, run by its schema in ``config.py``)."""
