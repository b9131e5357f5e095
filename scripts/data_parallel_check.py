"""Does a two-process data-parallel run (Keras 3 + JAX, keras.distribution, gloo on CPU) finish?

    python scripts/data_parallel_check.py          # prints a JSON verdict; exit 0 = both processes finished

Starts `scripts/train.py debug=tiny trainer.distribution=data_parallel data.bucketing=false` twice on
127.0.0.1 (a free port, KERAS_DISTRIBUTION_* for processes 0 and 1), past the check that refuses several
processes today, and reports each process's exit status and last error line. Today both train the first
epoch in step, then process 0's attention logging stops with "Fetching value for `jax.Array` that spans
non-addressable (non process local) devices is not possible".
"""

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from mha_project.cli import finish_all

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as scratch:
        command = [sys.executable, str(ROOT / "scripts" / "train.py"), "debug=tiny", "epochs=2", "batch_size=16"]
        command += ["trainer.distribution=data_parallel", "data.bucketing=false", f"hydra.run.dir={scratch}/run"]
        workers = []
        for process_id in (0, 1):
            env = dict(
                os.environ,
                KERAS_BACKEND="jax",
                KERAS_DISTRIBUTION_JOB_ADDRESSES=f"127.0.0.1:{port}",
                KERAS_DISTRIBUTION_NUM_PROCESSES="2",
                KERAS_DISTRIBUTION_PROCESS_ID=str(process_id),
                MHA_TRY_PROCESSES="1",
            )
            workers.append(
                subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            )
        results = []
        for process_id, (returncode, output) in enumerate(finish_all(workers, timeout=900)):
            errors = [line for line in output.splitlines() if re.match(r"\w+(Error|Exception): ", line)]
            results.append({"process": process_id, "returncode": returncode, "error": errors[:1]})
    finished = all(r["returncode"] == 0 for r in results)
    print(json.dumps({"two_process_run_finishes": finished, "processes": results}, indent=1))
    sys.exit(0 if finished else 1)


if __name__ == "__main__":
    main()
