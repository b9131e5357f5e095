"""``train(cfg)`` and what it uses: fitting, callbacks, the run directory, HParams, export."""
