"""The head view's Hydra callback (``hydra.callbacks.head_view``): when a run finishes, ``attention.html`` beside its
``model.keras``, the head view of its probes (``logger.attention.probe_texts``, or the first validation texts), and
the line that says where to open it. Cheap to import: the run is loaded only when the page is written."""

from __future__ import annotations

import logging
import shlex
from pathlib import Path

from hydra.experimental.callback import Callback

from mha_project.errors import UserError, disk_full, failing_the_command
from mha_project.extras.analysis.finished import has_attention
from mha_project.run_dir import METRICS_FILE
from mha_project.training.hydra_callbacks import job_error

log = logging.getLogger("mha_project.training.train")
PAGE_FILE = "attention.html"


class ProbePage(Callback):
    @failing_the_command
    def on_job_end(self, config, job_return, **kwargs) -> None:
        run_dir = Path(config.hydra.runtime.output_dir)
        page = run_dir / PAGE_FILE
        finished = job_error(job_return) is None and (run_dir / METRICS_FILE).is_file()
        if not (finished and config.head_view.html and has_attention(config)) or page.exists():
            return  # a run that finished before keeps the page it wrote then
        from mha_project.extras.analysis.runs import load_run
        from mha_project.extras.head_view.notebook import heads_title
        from mha_project.extras.head_view.page import write_head_view

        run = load_run(run_dir)
        attention = config.logger.attention
        probes, labels = list(attention.probe_texts), None
        if not probes:
            splits = run.splits()
            probes, labels = splits.val_texts[: attention.num_probes], splits.val_labels[: attention.num_probes]
        title = f"{run_dir.name}: {heads_title(run.cfg)}, {config.data.name}"
        try:
            written = write_head_view(page, run.model, run.preprocessor, probes, run.class_names, title, labels)
        except OSError as err:  # a full disk, no permission: the run is finished, its page is not
            why = "no space left on device" if disk_full(err) else err.strerror or str(err)
            raise UserError(
                f"{why} while writing {page}; the run itself is finished: run the same command again"
            ) from None
        if written:
            log.info(f"next: open {shlex.quote(str(page))} in a browser: the interactive head view")
