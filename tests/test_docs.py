"""The Korean quickstart only uses commands that the README documents (so they cannot drift apart)."""

import re

from conftest import ROOT


def bash_commands(markdown: str) -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", markdown, flags=re.S)
    commands = []
    for block in blocks:
        for line in block.splitlines():
            command = line.split("  #")[0].strip()
            if command:
                commands.append(command)
    return commands


def test_every_korean_quickstart_command_is_in_the_readme():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    korean = (ROOT / "docs" / "README.ko.md").read_text(encoding="utf-8")
    commands = bash_commands(korean)
    assert len(commands) >= 7  # install, train, test, heads=8, sweep + report, tensorboard, inspect
    missing = [c for c in commands if c not in readme]
    assert not missing, missing
    assert "docs/README.ko.md" in readme  # linked from the top of the README


def test_every_python_name_the_readme_imports_exists_and_its_examples_write_under_outputs():
    import importlib

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    imports = re.findall(r"from (mha_project[\w.]*) import (\w+)", readme)
    assert len(imports) >= 3
    for module, name in imports:
        assert hasattr(importlib.import_module(module), name), (module, name)
    # A name reached through the package alone (`mha_project.x.y`) would need the subpackage imported first.
    assert not re.findall(r"`mha_project\.\w+\.\w+\.\w+\(", readme)
    # What the README's commands write lands under outputs/ (ignored by git), never in the checkout.
    for command in bash_commands(readme):
        for flag in ("--out", "--html"):
            if f"{flag} " in command:
                assert command.split(f"{flag} ")[1].startswith("outputs/"), command
        assert ".to_csv('" not in command or ".to_csv(f'outputs/" in command, command


def test_every_readme_section_a_comment_names_is_a_heading_of_the_readme():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    headings = {line.lstrip("#").strip() for line in readme.splitlines() if line.startswith("#")}
    paths = [*(ROOT / "configs").rglob("*.yaml"), *(ROOT / "mha_project").rglob("*.py")]
    paths += (ROOT / "mha_project").rglob("*.yaml")  # the extras' config groups
    named = {found: path.name for path in paths for found in re.findall(r'README "([^"]+)"', path.read_text("utf-8"))}
    assert len(named) >= 3
    assert {section: path for section, path in named.items() if section not in headings} == {}


def test_the_readme_lists_every_experiment_there_is():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    row = next(line for line in readme.splitlines() if line.startswith("| `experiment` |"))
    listed = set(re.findall(r"`(\w+)`", row.split("|")[2]))
    files = [
        *(ROOT / "configs" / "experiment").glob("*.yaml"),
        *(ROOT / "mha_project").glob("extras/*/configs/experiment/*.yaml"),
    ]
    assert listed == {f.stem for f in files}


PATH = re.compile(
    r"(?<![\w./-])((?:mha_project|configs|scripts|docs|benchmarks|tests|hydra_plugins|notebooks)/[\w./-]*\w)"
)


def test_every_path_the_readme_and_docs_name_exists():
    documents = [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    named = {(doc.name, path) for doc in documents for path in PATH.findall(doc.read_text(encoding="utf-8"))}
    assert len(named) >= 40
    missing = sorted((doc, path) for doc, path in named if not (ROOT / path).exists())
    assert missing == []


def test_a_name_the_docs_place_in_a_file_is_in_that_file():
    documents = [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    near = r"`(\w+)`[^`\n]{0,40}\n?[^`\n]{0,20}`(mha_project/[\w/]+\.py)`"  # `OptunaPruning`, a callback in `path`
    placed = [(doc.name, *found) for doc in documents for found in re.findall(near, doc.read_text("utf-8"))]
    assert len(placed) >= 3
    assert [p for p in placed if p[1] not in (ROOT / p[2]).read_text("utf-8")] == []
