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
