"""What each attention head of a finished run does (``scripts/head_patterns.py``: entropy, positional mass, a
label per head, and on rule-built data the head that follows each relation) and which heads matter
(``scripts/head_importance.py``: accuracy with each head masked out). Registers the command a finished run
suggests next."""

import shlex

from mha_project.extending import NEXT_STEPS, RUN_FILES


def head_patterns_step(run_dir, attention: bool) -> list[str]:
    return [f"python scripts/head_patterns.py {shlex.quote(str(run_dir))}"] if attention else []


NEXT_STEPS.append(head_patterns_step)
RUN_FILES.extend(["head_patterns", "head_importance"])  # the tools' default output folders
