"""Reading a finished run back: ``runs.py`` (``load_run``: its config, model, vocabulary and splits, every
class loaded with ``safe_mode=True``; ``check_run_dir``: is this a finished run?), ``evaluate.py`` (the test
split again) and ``inspection.py`` (a sentence's attention, as ``scripts/inspect_attention.py`` prints it)."""
