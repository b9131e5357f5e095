"""The package's shape: the core (mha_project/ without extras/) imports nothing from the extras, and names none of
them; an extra is chosen by config (its `_target_` nodes, its Hydra callbacks), never by being imported."""

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


def test_importing_an_extra_registers_nothing_and_the_package_keeps_no_hook_lists():
    # Each extra's __init__.py is its docstring alone: an extra plugs in where a config names it.
    for init in sorted(EXTRAS.glob("*/__init__.py")):
        body = ast.parse(init.read_text(encoding="utf-8")).body
        assert len(body) == 1 and isinstance(body[0], ast.Expr), init
    # No registry: no module-level list or dict filled from elsewhere, no import hook.
    hooks = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            if isinstance(value, (ast.List, ast.Dict)) and not (
                value.elts if isinstance(value, ast.List) else value.keys
            ):
                hooks.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
        assert "meta_path" not in path.read_text(encoding="utf-8") and "MetaPathFinder" not in path.read_text()
    assert hooks == [] and not (PACKAGE / "extending.py").exists()


def test_parts_are_built_from_config_and_heads_reaches_the_layer_in_few_files():
    configs = [*PACKAGE.parent.joinpath("configs").rglob("*.yaml"), *EXTRAS.rglob("configs/**/*.yaml")]
    targets = sum(text.count("_target_:") for text in (c.read_text(encoding="utf-8") for c in configs))
    assert targets >= 6
    assert any("instantiate(" in p.read_text(encoding="utf-8") for p in core_files())
    naming = [str(p.relative_to(PACKAGE)) for p in core_files() if "num_heads" in p.read_text(encoding="utf-8")]
    assert len(naming) <= 4, naming


def exits_and_prints(path: Path) -> list[str]:
    """Where ``path`` ends the process or writes to the terminal itself: ``raise SystemExit``, ``sys.exit``,
    ``os._exit``, ``print``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            if name in ("print", "sys.exit", "os._exit", "exit", "quit"):
                found.append(f"{name}:{node.lineno}")
        elif isinstance(node, ast.Raise) and node.exc is not None and "SystemExit" in ast.unparse(node.exc):
            found.append(f"SystemExit:{node.lineno}")
    return found


def test_the_library_raises_and_only_the_entry_points_exit():
    where = {str(p.relative_to(PACKAGE)): exits_and_prints(p) for p in PACKAGE.rglob("*.py")}
    where = {path: found for path, found in where.items() if found}
    # The two left say why in place: the lines that follow a sweep (Hydra's root logger then writes into its last
    # job's train.log), and a process whose peers never join (JAX would abort it from C++, past any handler).
    assert {path: [f.split(":")[0] for f in found] for path, found in where.items()} == {
        "extras/sweep_report/callback.py": ["print"],
        "extras/distribution/devices.py": ["print", "os._exit"],
    }
    assert exits_and_prints(PACKAGE.parent / "scripts" / "entry.py")  # the check finds what it looks for


def test_no_function_of_the_package_is_named_like_a_test():
    named = [
        f"{path.relative_to(PACKAGE)}:{node.name}"
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name.startswith(("test_", "Test"))
    ]
    assert named == []
