"""The sweep report's Hydra callback (``hydra.callbacks.sweep_report``): a finished sweep's next step."""

from __future__ import annotations

import shlex

from hydra.experimental.callback import Callback


class SweepNextStep(Callback):
    def on_multirun_end(self, config, **kwargs) -> None:
        # Printed, not logged: after the jobs, the root logger writes into the last job's train.log.
        where = shlex.quote(str(config.hydra.sweep.dir))
        print(f"next: python scripts/sweep_report.py {where}   # the table, plot and means")
