"""Test-wide setting: nothing a test runs writes to the user's state directory or reads
the user's config file.

`rlm run` keeps every run in the run history and the journal defaults to a file
there; both live under ``$XDG_STATE_HOME/rlm`` (platformdirs).  Pointing it at a
temporary directory for the whole session (subprocesses inherit it) keeps the
tests from filling a developer's ``rlm runs``.

The suite starts a few hundred ``rlm`` and sandbox interpreters.  Where
``PYTHONDONTWRITEBYTECODE`` is set (this machine and CI), none of them writes
bytecode, so each one compiled every rlm module from source again (about a
third of an ``rlm run`` start-up).  Compiling rlm (fixtures and prompts included) and
rlm_sandbox once, here, into their ordinary ``__pycache__`` folders (git-ignored,
checked against the source's mtime like any bytecode) lets every child load them
instead.
"""

from __future__ import annotations

import compileall
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

import pytest

_TESTS = Path(__file__).resolve().parent

# One PostgreSQL server for the whole session: imported into each test module instead,
# its session-scoped fixture was a separate definition per module, one server each.
pytest_plugins = (
    "tests.journal_fixtures",
    "tests.journal_store_fixtures",
    # Every trace the suite writes is checked against the published trace schema.
    "tests.trace_schema_check",
    "pytester",  # tests/api/test_trace_schema.py shows that check failing a test
)

_STATE = tempfile.mkdtemp(prefix="rlm-tests-state-")
os.environ["XDG_STATE_HOME"] = _STATE
# Nor does a developer's own config file (~/.config/rlm/config.toml: a profile, a model)
# reach a test: the user config directory is an empty one too.
os.environ["XDG_CONFIG_HOME"] = os.path.join(_STATE, "config")

for _name in ("rlm", "rlm_sandbox"):  # found, not imported: nothing of rlm runs before the env
    _spec = importlib.util.find_spec(_name)
    assert _spec is not None and _spec.submodule_search_locations, _name
    for _folder in _spec.submodule_search_locations:
        compileall.compile_dir(_folder, quiet=1)
# In a source checkout rlm.fixtures and rlm.prompts live in the fixtures/ and prompts/ folders
# (pyproject's package-dir), outside rlm's own; an installed rlm holds them (compiled above).
for _checkout_folder in (_TESTS.parent / "fixtures", _TESTS.parent / "prompts"):
    if _checkout_folder.is_dir():
        compileall.compile_dir(_checkout_folder, quiet=1)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """How many pytest-xdist workers ``-n auto`` (pyproject's addopts) starts.

    Two for the whole suite on two or more cores: most tests wait on child processes,
    sockets and sleeps, so two workers share two cores well (measured on this 2-core
    machine under the same load: 259 s serial, 180 s with two).  None (the tests run in
    this process) when files or tests are named, where starting workers costs more than
    it saves, and on one core.
    """
    whole_suite = all(Path(arg).resolve() == _TESTS for arg in config.args)
    return 2 if whole_suite and len(os.sched_getaffinity(0)) >= 2 else 0


def pytest_sessionfinish() -> None:
    shutil.rmtree(_STATE, ignore_errors=True)
