"""The public API is pinned: a change to it is a decision, not an accident.

``public_api.json`` beside this file records ``rlm.__all__``, ``RLM``'s parameters and
public methods, the fields of the result types, and the error tree (each error's bases
and exit code).  When the API changes on purpose, write the file again and commit it
with the change (say what changed for a user in the commit message)::

    python tests/api/test_public_api.py

docs/compatibility.md says what is stable and how versions move.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import json
import re
import sys
import typing
from pathlib import Path
from typing import Any

import rlm
import rlm.errors
from rlm import RLM, RunResult, Usage
from rlm.volley.records import TaskResult, VolleyResult, VolleySummary

EXPECTED = Path(__file__).with_name("public_api.json")
RESULT_TYPES = (RunResult, Usage, VolleyResult, VolleySummary, TaskResult)


def api_snapshot() -> dict[str, Any]:
    """What the pin records, as plain JSON data."""
    methods = {name: str(inspect.signature(value))
               for name, value in sorted(vars(RLM).items())
               if not name.startswith("_") and callable(value)}
    properties = sorted(name for name, value in vars(RLM).items()
                        if not name.startswith("_") and isinstance(value, property))
    return {
        "__all__": sorted(rlm.__all__),
        "RLM": {
            "parameters": [str(p) for p in inspect.signature(RLM).parameters.values()],
            "methods": methods,
            "properties": properties,
        },
        "results": {cls.__name__: _fields(cls) for cls in RESULT_TYPES},
        "errors": {
            name: {"bases": [base.__name__ for base in error.__bases__],
                   "exit_code": error.exit_code}
            for name in sorted(rlm.errors.__all__)
            if isinstance(error := getattr(rlm.errors, name), type)
            and issubclass(error, rlm.errors.RLMError)
        },
    }


def _fields(cls: type) -> dict[str, str]:
    """Each field's type, aliases resolved (a status's names are part of the API)."""
    hints = typing.get_type_hints(cls)
    return {f.name: _shown(hints[f.name]) for f in dataclasses.fields(cls)}


def _shown(hint: Any) -> str:
    if isinstance(hint, type):
        return hint.__name__
    return re.sub(r"\b(?:[a-z_]\w*\.)+", "", repr(hint))  # typing.X, rlm.module.X: X


def render(snapshot: dict[str, Any]) -> str:
    return json.dumps(snapshot, indent=1, ensure_ascii=False) + "\n"


def test_the_public_api_is_what_public_api_json_records() -> None:
    now = render(api_snapshot())
    pinned = EXPECTED.read_text(encoding="utf-8")
    if now != pinned:
        diff = "".join(difflib.unified_diff(
            pinned.splitlines(keepends=True), now.splitlines(keepends=True),
            "public_api.json (pinned)", "the API now"))
        raise AssertionError(
            "rlm's public API changed. If that is intended, run "
            "`python tests/api/test_public_api.py` to pin it again, commit "
            "tests/api/public_api.json with the change, and say in the commit message what "
            "changed for a user (docs/compatibility.md). The difference:\n" + diff)


if __name__ == "__main__":
    EXPECTED.write_text(render(api_snapshot()), encoding="utf-8")
    print(f"wrote {EXPECTED}", file=sys.stderr)
