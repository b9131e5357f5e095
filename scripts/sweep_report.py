"""Summarise a sweep: report.md, report.csv and report.png inside SWEEP_DIR, and the table printed.

python scripts/sweep_report.py outputs/multirun/<time>
"""

import argparse
from pathlib import Path

from mha_project.errors import UserError

from entry import fail, import_tensorflow_quietly  # scripts/entry.py: an error as one line and an exit status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dir", help="a Hydra multirun directory (outputs/multirun/<time>)")
    args = parser.parse_args()
    if not Path(args.sweep_dir).is_dir():  # answered at once, before matplotlib loads
        fail(f"sweep dir {args.sweep_dir} does not exist or is not a directory")
    try:
        import_tensorflow_quietly()
        from mha_project.extras.sweep_report.report import write_report

        sections = []
        if (Path(args.sweep_dir) / "optuna_study.json").is_file():  # hparams_search=optuna: the study's section
            from mha_project.extras.optuna.report_section import study_report

            sections.append(study_report)
        result = write_report(args.sweep_dir, sections)
    except UserError as err:
        fail(str(err))
    print(result["markdown"], end="")
    failed = [j for j in result["jobs"] if j["status"] not in ("finished", "pruned")]
    print(
        f"{len(result['jobs'])} jobs, {len(failed)} failed or unfinished; "
        f"wrote report.md, report.csv{', report.png' if result['plot'] else ''} in {args.sweep_dir}"
    )


if __name__ == "__main__":
    main()
