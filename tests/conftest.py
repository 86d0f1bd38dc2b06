"""Test-wide setting: nothing a test runs writes to the user's state directory.

`rlm run` keeps every run in the run history and the journal defaults to a file
there; both live under ``$XDG_STATE_HOME/rlm`` (platformdirs).  Pointing it at a
temporary directory for the whole session (subprocesses inherit it) keeps the
tests from filling a developer's ``rlm runs``.
"""

from __future__ import annotations

import os
import shutil
import tempfile

_STATE = tempfile.mkdtemp(prefix="rlm-tests-state-")
os.environ["XDG_STATE_HOME"] = _STATE


def pytest_sessionfinish() -> None:
    shutil.rmtree(_STATE, ignore_errors=True)
