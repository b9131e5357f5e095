"""A run directory that knows which run it holds (``record.py``: ``open_run``, chosen by the ``run_record:``
node): the same command again resumes a killed run where it stopped (``backup.py``) or reports a finished one;
another config, another process, or a folder of a user's own files is refused in one line;
``run_record.overwrite=true`` replaces a run; a failed job says why in ``failure.json`` (``callback.py``). Without
this extra ``train`` writes only into a new or empty directory."""
