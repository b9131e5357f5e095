"""The package's shape: the core (mha_project/ without extras/) imports nothing from the extras, and names
none of them; each extra plugs in through mha_project/extending.py, Keras callbacks or Hydra callbacks."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "mha_project"
EXTRAS = PACKAGE / "extras"


def core_files() -> list[Path]:
    return [p for p in PACKAGE.rglob("*.py") if EXTRAS not in p.parents]


def imported_modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return found


def test_the_core_imports_no_extra_and_names_none():
    assert len(core_files()) > 20 and (EXTRAS / "__init__.py").is_file()
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(m for m in imported_modules(path) if m.startswith("mha_project.extras"))
        for path in core_files()
    }
    assert {path: modules for path, modules in offenders.items() if modules} == {}
    # Nor by a string (importlib, a Hydra _target_): the extras are found, never named, by the core.
    named = [str(p.relative_to(PACKAGE)) for p in core_files() if "extras." in p.read_text(encoding="utf-8")]
    assert named == []


def test_every_extra_is_a_package_that_imports_alone():
    import importlib
    import subprocess
    import sys

    extras = sorted(p.parent.name for p in EXTRAS.glob("*/__init__.py"))
    for name in extras:
        importlib.import_module(f"mha_project.extras.{name}")
    # A fresh process: what an extra registers must not depend on another having been imported first.
    code = "; ".join(f"import mha_project.extras.{name}" for name in extras[::-1])
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).returncode == 0
