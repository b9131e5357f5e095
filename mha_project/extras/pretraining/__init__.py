"""Self-supervised pretraining (``pretrain=mlm|electra``): a masked-LM or ELECTRA stage on the training texts before
the classifier's fit (``stage.py``: ``PretrainingStage``, the ``_target_`` of the ``pretrain:`` node, which ``train``
calls before it builds the classifier), whose backbone the classifier starts from (or another run's:
``pretrain.from_run``); ``scripts/fill_mask.py`` asks a run's masked LM (``fill_mask.py``). docs/pretraining.md has
the measurements."""
