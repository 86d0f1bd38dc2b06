"""The README's two commands are the contract for a fresh machine; CI runs the second verbatim."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


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


def _anchors(markdown: Path) -> set[str]:
    """The #fragments GitHub gives a file's headings (repeats get -1, -2 …)."""
    seen: dict[str, int] = {}
    in_code = False
    for line in markdown.read_text(encoding="utf-8").splitlines():
        in_code = in_code != line.startswith("```")
        heading = re.match(r"#+\s+(.*)", line)
        if heading and not in_code:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
            seen[slug] = seen.get(slug, -1) + 1
            if seen[slug]:
                slug = f"{slug}-{seen[slug]}"
            seen.setdefault(slug, 0)
    return set(seen)


def _documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_every_link_between_the_docs_resolves() -> None:
    broken = []
    for doc in _documents():
        for target, fragment in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]+))?\)",
                                           doc.read_text(encoding="utf-8")):
            if target.startswith(("http://", "https://")):
                continue
            path = (doc.parent / target) if target else doc
            if not path.exists():
                broken.append(f"{doc.name}: ({target}) does not exist")
            elif fragment and path.suffix == ".md" and fragment not in _anchors(path):
                broken.append(f"{doc.name}: ({target}#{fragment}) names no heading")
    assert not broken


#: A source path in backticks: the repository's folders (rlm_sandbox/ too, so a doc that
#: still names the sandbox's old folder fails), then a .py, .md or .json file.
_SOURCE_PATH = re.compile(
    r"`((?:rlm|sandbox|fixtures|prompts|rlm_sandbox|benchmarks|tests)/[\w/.-]+\.(?:py|md|json))`"
)


def test_every_source_file_the_docs_name_exists() -> None:
    named = {
        path
        for doc in _documents()
        for path in _SOURCE_PATH.findall(doc.read_text(encoding="utf-8"))
    }
    assert named  # the pattern still finds what the docs name
    assert sorted(p for p in named if not (ROOT / p).exists()) == []
