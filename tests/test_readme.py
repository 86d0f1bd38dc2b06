"""The README's two commands are the contract for a fresh machine; CI runs the second verbatim."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(r"```sh\n(.*?)\n```", text, re.DOTALL)


def test_readme_starts_with_a_run_command_and_a_test_command() -> None:
    first, second = readme_commands()[:2]
    for command in (first, second):
        assert "\n" not in command  # one line each, copy-paste ready
        assert command.startswith("python3 -m venv .venv && .venv/bin/pip install")
    assert "rlm run" in first and "--provider fixture" in first
    assert "pytest" in second


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert readme_commands()[1] in ci.splitlines()
