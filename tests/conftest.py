"""Test-wide setting: nothing a test runs writes to the user's state directory.

`rlm run` keeps every run in the run history and the journal defaults to a file
there; both live under ``$XDG_STATE_HOME/rlm`` (platformdirs).  Pointing it at a
temporary directory for the whole session (subprocesses inherit it) keeps the
tests from filling a developer's ``rlm runs``.

The suite starts a few hundred ``rlm`` and sandbox interpreters.  Where
``PYTHONDONTWRITEBYTECODE`` is set (this machine and CI), none of them writes
bytecode, so each one compiled every rlm module from source again (about a
third of an ``rlm run`` start-up).  Compiling rlm and rlm_sandbox once, here,
into their ordinary ``__pycache__`` folders (git-ignored, checked against the
source's mtime like any bytecode) lets every child load them instead.
"""

from __future__ import annotations

import compileall
import os
import shutil
import tempfile
from pathlib import Path

import rlm
import rlm_sandbox

_STATE = tempfile.mkdtemp(prefix="rlm-tests-state-")
os.environ["XDG_STATE_HOME"] = _STATE

for _package in (rlm, rlm_sandbox):
    compileall.compile_dir(Path(_package.__file__).parent, quiet=1)


def pytest_sessionfinish() -> None:
    shutil.rmtree(_STATE, ignore_errors=True)
