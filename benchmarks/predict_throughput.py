"""Rows per second of scripts/predict.py against Run.predict in a loop and the SavedModel's serve in batches.

    python benchmarks/predict_throughput.py RUN_DIR TABLE [--rows 100000]

RUN_DIR: a finished run with export/ (train.py savedmodel.export=true, the default); TABLE: a CSV with a text column
(scripts/scale_table.py writes one). The three read the same first --rows texts; predict.py runs as its users
run it (one process, its own start-up excluded: its reported rows/s), the other two in this process.
Prints one JSON object.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir")
    parser.add_argument("table")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--loop-rows", type=int, default=2000, help="texts for Run.predict called once per text")
    args = parser.parse_args()
    import pandas as pd

    texts = pd.read_csv(args.table, nrows=args.rows)["text"].astype(str).tolist()
    subset = Path(f"/tmp/predict_input_{len(texts)}.csv")
    pd.DataFrame({"text": texts}).to_csv(subset, index=False)
    out = subset.with_suffix(".out.csv")
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "predict.py"), args.run_dir, str(subset), "--out", str(out)],
        capture_output=True,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    if done.returncode:
        sys.exit(done.stderr)
    script_seconds = time.perf_counter() - started
    reported = float(done.stderr.strip().splitlines()[-1].rsplit(", ", 1)[1].split()[0].replace(",", ""))

    from mha_project.quiet import import_tensorflow_quietly

    import_tensorflow_quietly()
    import tensorflow as tf

    from mha_project.extras.analysis.runs import load_run

    run = load_run(args.run_dir)
    loop = texts[: args.loop_rows]
    started = time.perf_counter()
    for text in loop:
        run.predict(text)
    loop_rate = len(loop) / (time.perf_counter() - started)
    exported = tf.saved_model.load(str(Path(args.run_dir) / "export"))
    started = time.perf_counter()
    for begin in range(0, len(texts), 256):
        exported.serve(tf.constant(texts[begin : begin + 256]))
    serve_rate = len(texts) / (time.perf_counter() - started)
    print(
        json.dumps(
            {
                "rows": len(texts),
                "predict_py_rows_per_second": round(reported),
                "predict_py_wall_seconds_with_start_up": round(script_seconds, 1),
                "run_predict_loop_rows_per_second": round(loop_rate, 1),
                "saved_model_serve_batches_of_256_rows_per_second": round(serve_rate),
                "cpus": os.cpu_count(),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
