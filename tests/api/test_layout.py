"""The layout keeps its promises: the repository's top level is the project's card, runtime code
never imports bench or test code, and the package installs no generic top-level names.

The card's top-level folders sandbox/, fixtures/ and prompts/ each hold one package at its
import path (sandbox/rlm_sandbox, fixtures/rlm/fixtures, prompts/rlm/prompts): setuptools maps
them (pyproject's package-dir), and mypy (mypy_path) and ruff (src) find the same modules by
path.  tests/api/test_install.py builds and installs it."""

from __future__ import annotations

import ast
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Only these may import rlm.bench / rlm.testing: themselves, and the commands that run them.
ALLOWED = {"rlm/bench", "rlm/testing", "rlm/cli/bench_cmd.py", "rlm/cli/fixture_cmds.py"}
#: The packages that live in a top-level folder of their own, and where.
MAPPED = {
    "rlm_sandbox": "sandbox/rlm_sandbox",
    "rlm.fixtures": "fixtures/rlm/fixtures",
    "rlm.prompts": "prompts/rlm/prompts",
}
#: The project's card, plus the docs (mkdocs.yml is mkdocs' own place for its config), the
#: benchmarks and CI.
TOP_LEVEL = {
    "pyproject.toml", "README.md", "rlm", "sandbox", "fixtures", "prompts", "tests",
    "docs", "mkdocs.yml", "benchmarks", ".ci", ".gitignore",
}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_runtime_modules_never_import_bench_or_test_code() -> None:
    offenders = []
    runtime = [ROOT / "rlm", ROOT / MAPPED["rlm.fixtures"], ROOT / MAPPED["rlm.prompts"]]
    for path in sorted(p for folder in runtime for p in folder.rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        if any(where == a or where.startswith(a + "/") for a in ALLOWED):
            continue
        for name in _imports(path):
            if name.split(".")[:2] in (["rlm", "bench"], ["rlm", "testing"]):
                offenders.append(f"{where} imports {name}")
    assert offenders == []


def test_the_sandbox_child_imports_nothing_from_rlm() -> None:
    for path in sorted((ROOT / MAPPED["rlm_sandbox"]).rglob("*.py")):
        assert not any(n == "rlm" or n.startswith("rlm.") for n in _imports(path)), path


def test_installed_packages_have_rlms_names_and_every_code_folder_ships() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))[
        "tool"]["setuptools"]
    packages = setuptools["packages"]
    assert all(p == "rlm_sandbox" or p == "rlm" or p.startswith("rlm.") for p in packages)
    assert setuptools["package-dir"] == MAPPED
    for name, folder in MAPPED.items():
        # The folder ends in the import path, so mypy and ruff name its modules as setuptools does.
        assert folder.split("/", 1)[1] == name.replace(".", "/")
        assert (ROOT / folder / "__init__.py").exists(), folder
    # Every folder with code is a listed package, so it ships.
    folders = {name: ROOT / folder for name, folder in MAPPED.items()}
    folders.update(
        {".".join(d.relative_to(ROOT).parts): d for d in [ROOT / "rlm", *(ROOT / "rlm").rglob("*")]}
    )
    for name, path in folders.items():
        if path.is_dir() and any(path.glob("*.py")):
            assert (path / "__init__.py").exists(), f"{path} would not ship"
            assert name in packages, f"{name} would not ship: list it in pyproject's packages"


def _tracked() -> list[str]:
    try:
        listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True,
                                check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked top level cannot be listed")
    return [p for p in listed.decode().split("\0") if p]


def test_the_top_level_is_the_cards_and_its_folders_hold_only_their_package() -> None:
    tracked = _tracked()
    top = {p.split("/")[0] for p in tracked}
    assert top - TOP_LEVEL == set(), "the top level is the card's: put these in docs/, .ci/..."
    assert TOP_LEVEL - top == set()
    for folder in MAPPED.values():
        card = folder.split("/")[0]
        stray = [p for p in tracked if p.startswith(card + "/") and not p.startswith(folder + "/")]
        assert stray == [], f"{card}/ holds only {folder}/ (nothing else would ship)"
    for generic in ("sandbox", "fixtures", "prompts"):
        assert not (ROOT / generic / "__init__.py").exists()
