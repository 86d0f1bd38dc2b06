"""Every trace the suite writes matches the published trace schema (a pytest plugin).

After each test, the traces written since the last look — anywhere under the session's
temporary directories or its state directory (the run history), by the test's own
process or by an ``rlm`` it started — are checked against the schema in its strict form
(``rlm._trace_schema.strict_schema``: no kind and no field it does not declare).  A
trace is known by its first line, the ``trace_started`` header every trace writer
writes; a mismatch fails the test that was running, naming the file, the line and what
is wrong.  A test that writes a foreign trace on purpose (an unknown kind "from a newer
rlm", a hand-edited field) says so with ``@pytest.mark.foreign_traces``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from stat import S_ISREG

import pytest

from rlm._trace_schema import check_trace

#: How a trace's first line starts (json.dumps of the trace writer's header).
HEADER = b'{"event": "trace_started"'


class TraceChecker:
    """Finds the traces written under some folders since it last looked, and checks them."""

    def __init__(self, roots: list[Path]) -> None:
        self.roots = roots
        self._seen: dict[str, tuple[int, int]] = {}

    def new_traces(self) -> list[Path]:
        found = []
        for root in self.roots:
            for folder, _dirs, files in os.walk(root):
                for name in files:
                    path = os.path.join(folder, name)
                    try:
                        stat = os.stat(path)
                    except OSError:  # removed while we looked
                        continue
                    if not S_ISREG(stat.st_mode):  # a FIFO a test made would block a read
                        continue
                    mark = (stat.st_mtime_ns, stat.st_size)
                    if self._seen.get(path) != mark:
                        self._seen[path] = mark
                        if _starts_as_a_trace(path):
                            found.append(Path(path))
        return found

    def problems(self) -> list[str]:
        out = []
        for path in self.new_traces():
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            out += [f"{path}: {problem}" for problem in check_trace(text, strict=True)[:5]]
        return out


def _starts_as_a_trace(path: str) -> bool:
    try:
        with open(path, "rb") as file:
            return file.read(len(HEADER)) == HEADER
    except OSError:
        return False


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "foreign_traces: the test writes traces that do not match the schema on "
        "purpose (they are not checked)")


@pytest.fixture(scope="session")
def trace_checker(tmp_path_factory: pytest.TempPathFactory) -> TraceChecker:
    roots = [tmp_path_factory.getbasetemp()]
    state = os.environ.get("XDG_STATE_HOME")
    if state:
        roots.append(Path(state))
    return TraceChecker(roots)


@pytest.fixture(autouse=True)
def _traces_match_the_schema(request: pytest.FixtureRequest,
                             trace_checker: TraceChecker) -> Iterator[None]:
    yield
    if request.node.get_closest_marker("foreign_traces") is not None:
        trace_checker.new_traces()  # seen, not checked
        return
    problems = trace_checker.problems()
    if problems:
        pytest.fail(
            "a trace written here does not match rlm/data/trace-schema.json. If an event "
            "changed on purpose, run `python -m rlm._trace_schema` (an event kind in a new "
            "module: import it in rlm._trace_schema.event_classes); if the test writes a "
            "foreign trace on purpose, mark it @pytest.mark.foreign_traces.\n"
            + "\n".join(problems), pytrace=False)
