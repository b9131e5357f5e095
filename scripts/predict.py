"""Label a file of texts with a finished run.

    python scripts/predict.py outputs/runs/<time> outputs/reviews.csv --out outputs/predictions.csv
    python scripts/predict.py outputs/runs/<time> texts.txt                 # one text a line -> CSV on stdout
    echo "great tea, would buy again" | python scripts/predict.py outputs/runs/latest -

INPUT is a table (.csv, .tsv, .jsonl, .parquet; the texts in --text-column) or a plain text file, one text a
line (``-``: standard input). Every input row is written, in order, with predicted_class and one prob_<class>
column per class: to --out (its extension picks CSV, TSV, JSON lines or Parquet) or, without it, to standard
output in the input's format (CSV for plain text and Parquet). The output file appears only when every row
is done, and keeps the mode of a file it replaces. Every column of the input is kept (JSON lines: every key of
every row, with its JSON type; Parquet: the file's own types; a JSON object or list in a CSV cell as JSON).
Refused in one line, before anything is written: an --out that is the input however it arrives (a path, -,
a link: compared by device and inode), a directory, a read-only file or a file in a run directory; an input that
already has a predicted_class or prob_<class> column, or whose text column holds anything but strings. Ctrl-C
or SIGTERM stops it within a chunk, and the half-written output is removed. Only the run's model.keras and
vocab.txt are read, not its data.
"""

import argparse
import signal
import sys

from mha_project.errors import UserError
from mha_project.extras.analysis.finished import check_run_dir
from mha_project.extras.sweep_report.tables import plural

from entry import fail, import_tensorflow_quietly  # scripts/entry.py: an error as one line and an exit status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", help="a run directory written by scripts/train.py")
    parser.add_argument("input", help="a .csv/.tsv/.jsonl/.parquet table, a text file (one text a line), or -")
    parser.add_argument("--out", help="where to write (default: standard output)")
    parser.add_argument("--text-column", help="a table's text column (default: the run's data.text_column, or text)")
    parser.add_argument("--batch-size", type=int, default=256, help="texts per model call (default 256)")
    args = parser.parse_args()
    # SIGTERM as Ctrl-C, at once (start-up, a wait on standard input): the half-written temporary file is
    # removed on the way out, and one line says so.
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        check_run_dir(args.run_dir)  # answered in a second, before TensorFlow loads
        if args.batch_size < 1:
            raise UserError(f"--batch-size={args.batch_size} is invalid: must be an integer >= 1")
        import_tensorflow_quietly()
        from mha_project.extras.analysis.runs import load_run
        from mha_project.extras.predict.predict import predict_file, progress_bar

        run = load_run(args.run_dir, needs_data=False)  # model.keras and vocab.txt are all predicting needs
        column = args.text_column or run.cfg.data.get("text_column") or "text"
        result = predict_file(run, args.input, args.out, column, args.batch_size, progress_bar())
    except UserError as err:
        fail(str(err))
    except KeyboardInterrupt:
        signum = _received[0] if _received else signal.SIGINT  # none noted: Ctrl-C's own KeyboardInterrupt
        where = f"; {args.out} was not written" if args.out else ""
        fail(f"interrupted ({'SIGTERM' if signum == signal.SIGTERM else 'Ctrl-C'}){where}", code=128 + signum)
    if sys.stderr.isatty():
        sys.stderr.write("\n")
    where = args.out or "standard output"
    missing = f" ({result['without_text']} without a text left unlabelled)" if result["without_text"] else ""
    rate = round(result["rows_per_second"])
    print(f"wrote {plural(result['rows'], 'row')} to {where}{missing}, {plural(rate, 'row')}/s", file=sys.stderr)


_received = []  # the stop signal received


def _stop(signum, frame):
    _received.append(signum)
    from mha_project.extras.predict.writer import CRITICAL  # no TensorFlow: a cheap module

    if CRITICAL["depth"]:  # creating or renaming the output: raised when that ends (writer.uninterrupted)
        CRITICAL["pending"] = signum
        return
    raise KeyboardInterrupt


if __name__ == "__main__":
    main()
