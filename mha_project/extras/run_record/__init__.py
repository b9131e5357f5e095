"""A run directory that knows which run it holds (``record.py``): the same command again resumes a killed run
where it stopped or reports a finished one; another config, another process, or a folder of a user's own files
is refused in one line; ``overwrite=true`` replaces a run; a failed run says why in ``failure.json``; every fit
backs up each epoch to resume from (``backup.py``). Without this extra ``train`` only writes into a new or empty
directory."""

from dataclasses import dataclass

from omegaconf import MISSING

from mha_project.extending import FIT_BACKUPS, RUN_RECORDS, settings
from mha_project.extras.run_record.record import open_run


@settings("")
@dataclass
class RunRecordSettings:
    overwrite: bool = MISSING  # true: replace a run dir that holds a different (or unfinished) run


RUN_RECORDS.append(open_run)


def backup(backup_dir, history_csv):
    from mha_project.extras.run_record.backup import ResumableBackup

    return ResumableBackup(backup_dir, history_csv)


FIT_BACKUPS.append(backup)
