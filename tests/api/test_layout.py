"""The layout keeps its promises: runtime code never imports bench or test code, and the
package installs no generic top-level names."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Only these may import rlm.bench / rlm.testing: themselves, and the commands that run them.
ALLOWED = {"rlm/bench", "rlm/testing", "rlm/cli/bench_cmd.py", "rlm/cli/fixture_cmds.py"}


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
    for path in sorted((ROOT / "rlm").rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        if any(where == a or where.startswith(a + "/") for a in ALLOWED):
            continue
        for name in _imports(path):
            if name.split(".")[:2] in (["rlm", "bench"], ["rlm", "testing"]):
                offenders.append(f"{where} imports {name}")
    assert offenders == []


def test_the_sandbox_child_imports_nothing_from_rlm() -> None:
    for path in sorted((ROOT / "rlm_sandbox").rglob("*.py")):
        assert not any(n == "rlm" or n.startswith("rlm.") for n in _imports(path)), path


def test_installed_packages_are_found_and_none_has_a_generic_name() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    found = config["tool"]["setuptools"]["packages"]["find"]["include"]
    assert found == ["rlm", "rlm.*", "rlm_sandbox"]
    for generic in ("sandbox", "fixtures", "prompts"):
        assert not (ROOT / generic / "__init__.py").exists()
    # Every folder with code under rlm/ is a package, so it ships.
    for folder in (ROOT / "rlm").rglob("*"):
        if folder.is_dir() and any(folder.glob("*.py")):
            assert (folder / "__init__.py").exists(), f"{folder} would not ship"
