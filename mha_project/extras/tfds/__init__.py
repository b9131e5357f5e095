"""``data=imdb`` and ``data=ag_news``: datasets of TensorFlow Datasets (``texts.py``: ``TfdsData``, the
``_target_`` of their configs), with their settings (``config.py``: ``data.tfds_name``, ``data.data_dir``,
``data.download``)."""
