"""A sweep's report (``scripts/sweep_report.py``): one row per job, the means over seeds, the plot of accuracy
against the swept keys, and the sections other extras add (``extending.SWEEP_REPORT_SECTIONS``). Registers the
command a finished sweep suggests next."""

from mha_project.extending import SWEEP_NEXT_STEPS


def sweep_report_step(where: str) -> str:
    return f"python scripts/sweep_report.py {where}   # the table, plot and means"


SWEEP_NEXT_STEPS.append(sweep_report_step)
