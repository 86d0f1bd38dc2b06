"""The run history: every run's trace and summary, kept where a person can find them later.

Each run gets a directory ``<state>/runs/<ID>/`` holding ``trace.jsonl`` and
``summary.json``.  ``<state>`` is the platform's user state directory
(platformdirs: ``$XDG_STATE_HOME/rlm`` on Linux, the same place the journal
uses).  IDs sort by start time (``20261123-091502-417301-3fa9``: UTC date, time,
microseconds and 4 random hex digits), so the newest run is the last one and a unique prefix of
an ID names a run.

The summary is written when the run starts (status ``running``, with the
process id) and replaced when it ends, each time through a temporary file
renamed into place; a run killed with ``kill -9`` keeps its first summary, is
listed as ``killed``, and its half-written trace can still be viewed.  When
the history passes its size cap the oldest runs are removed; a killed run's
half-written trace counts in its size like any file.
"""

from __future__ import annotations

import datetime
import json
import os
import secrets
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs

from rlm._trace import half_written, part_path
from rlm.errors import UsageError

__all__ = ["DEFAULT_CAP_BYTES", "HISTORY_ENV", "RunEntry", "RunHistory", "history_enabled"]

DEFAULT_CAP_BYTES = 256 * 2**20
#: ``RLM_HISTORY=off`` (or 0/no/false) turns the history off, like ``--no-history``.
HISTORY_ENV = "RLM_HISTORY"
#: ``RLM_HISTORY_MAX_MB=N`` sets the size cap.
CAP_ENV = "RLM_HISTORY_MAX_MB"


def history_enabled(flag: bool) -> bool:
    """Whether this run keeps history: the flag, unless the environment turns it off."""
    return flag and os.environ.get(HISTORY_ENV, "").strip().lower() not in (
        "0", "off", "no", "false")


@dataclass(frozen=True, slots=True)
class RunEntry:
    """One run's directory in the history."""

    id: str
    path: Path

    @property
    def summary_path(self) -> Path:
        return self.path / "summary.json"

    @property
    def trace_path(self) -> Path:
        return self.path / "trace.jsonl"

    def trace_file(self) -> Path | None:
        """The trace, or the half-written one a killed run left behind, or None.

        A run given ``--trace PATH`` writes there and its trace is kept here when it
        ends; a killed one's half-written trace is still beside PATH, named by its pid.
        """
        if self.trace_path.exists():
            return self.trace_path
        found = half_written(self.trace_path)
        if found is not None:
            return found
        stored = self._stored()
        user, pid = stored.get("user_trace"), stored.get("pid")
        if isinstance(user, str) and user and isinstance(pid, int):
            part = part_path(Path(user), pid)
            return part if part.exists() else None
        return None

    def _stored(self) -> dict[str, Any]:
        try:
            data = json.loads(self.summary_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {"status": "unknown"}
        return data if isinstance(data, dict) else {"status": "unknown"}

    def summary(self) -> dict[str, Any]:
        """The stored summary (``status`` ``killed`` when its process died mid-run)."""
        data = self._stored()
        data["id"] = self.id
        if data.get("status") == "running" and not _alive(data.get("pid")):
            data["status"] = "killed"
        trace = self.trace_file()
        data["trace"] = str(trace) if trace is not None else None
        return data

    def write_summary(self, summary: Mapping[str, Any]) -> None:
        tmp = self.path / f".summary.{os.getpid()}.part"
        # A query from bytes that were not UTF-8 (a shell argument: a lone surrogate) is
        # written as the JSON escape \udcXX, which reads back the same, as the trace does.
        tmp.write_text(json.dumps(dict(summary), ensure_ascii=False, indent=1), encoding="utf-8",
                       errors="backslashreplace")
        os.replace(tmp, self.summary_path)


class RunHistory:
    """The directory of past runs (``root``: default ``<user state dir>/runs``)."""

    def __init__(self, root: Path | None = None, *, cap_bytes: int | None = None) -> None:
        self.root = root if root is not None else platformdirs.user_state_path("rlm") / "runs"
        self.cap_bytes = cap_bytes if cap_bytes is not None else _cap_from_env()

    def begin(self, summary: Mapping[str, Any]) -> RunEntry:
        """Make a new entry for a run that starts now; its first summary says ``running``."""
        now = datetime.datetime.now(datetime.UTC)
        # Microseconds keep runs started in the same second in order; the hex keeps IDs unique.
        run_id = f"{now:%Y%m%d-%H%M%S-%f}-{secrets.token_hex(2)}"
        entry = RunEntry(run_id, self.root / run_id)
        try:
            entry.path.mkdir(parents=True, exist_ok=False)
            entry.write_summary({"status": "running", "pid": os.getpid(),
                                 "started": now.isoformat(timespec="seconds"), **summary})
        except OSError as exc:
            raise UsageError(f"cannot keep this run in the history at {self.root}: "
                             f"{exc.strerror}; pass --no-history or set {HISTORY_ENV}=off") from exc
        return entry

    def entries(self) -> list[RunEntry]:
        """Every run, oldest first."""
        try:
            names = sorted(p.name for p in self.root.iterdir() if p.is_dir()
                           and not p.name.startswith("."))
        except FileNotFoundError:
            return []
        except OSError as exc:  # XDG_STATE_HOME names a file, or a folder we cannot read
            raise UsageError(f"cannot read the run history at {self.root}: {exc.strerror}; "
                             "check XDG_STATE_HOME") from exc
        return [RunEntry(name, self.root / name) for name in names]

    def find(self, ref: str) -> RunEntry:
        """The run ``ref`` names: ``last``, ``last~N`` (N runs before it), an ID or its prefix."""
        entries = self.entries()
        if not entries:
            raise UsageError(f"no runs in the history yet ({self.root}): `rlm run` keeps each "
                             "run there unless --no-history is given")
        if ref == "last" or ref.startswith("last~"):
            back = ref[5:]
            if back and not back.isdigit():
                raise UsageError(f"{ref!r}: use last, last~1, last~2, ...")
            index = len(entries) - 1 - int(back or 0)
            if index < 0:
                raise UsageError(f"the history holds only {len(entries)} run(s)")
            return entries[index]
        matches = [e for e in entries if e.id.startswith(ref)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise UsageError(f"no run {ref!r} in the history: `rlm runs` lists them")
        raise UsageError(f"{ref!r} names {len(matches)} runs: give more of the ID")

    def prune(self, keep: RunEntry | None = None) -> list[str]:
        """Remove the oldest runs until the history fits its cap; the IDs removed.

        Measuring every run's files costs a stat per file, every run: a small
        ledger (``.size``) holds the total and how many runs it counts instead,
        and a run that keeps the total under the cap only adds its own size to
        it.  That holds only when the ledger counts every other run: a run killed
        before it could add its size (its half-written ``.part`` trace can be
        the largest file here), one still running, or one removed by hand makes
        the count differ from the runs on disk, and then everything is measured
        again, half-written traces included; so is it when the ledger says the
        cap is passed (or it is missing).
        """
        known = _read_ledger(self.root)
        if known is not None and keep is not None:
            total, runs = known
            names = _run_names(self.root)
            if len(names) == runs + 1 and keep.id in names:
                total += _size(keep.path)
                if total <= self.cap_bytes:
                    _write_ledger(self.root, total, runs + 1)
                    return []
        entries = self.entries()
        sizes = {e.id: _size(e.path) for e in entries}
        total = sum(sizes.values())
        removed = []
        for entry in entries:
            if total <= self.cap_bytes:
                break
            if keep is not None and entry.id == keep.id:
                continue
            # Another run may be pruning the same entry at the same moment: missing is fine.
            shutil.rmtree(entry.path, ignore_errors=True)
            total -= sizes[entry.id]
            removed.append(entry.id)
        _write_ledger(self.root, total, len(entries) - len(removed))
        return removed


_LEDGER = ".size"
# Written in place at a fixed width, so an update never leaves a longer number's tail behind.
_LEDGER_DIGITS = 20


def _read_ledger(root: Path) -> tuple[int, int] | None:
    """The ledger's total bytes and the number of runs it counts, or None."""
    try:
        total, runs = (int(field) for field in (root / _LEDGER).read_bytes().split())
    except (OSError, ValueError):  # none yet, torn, or an older one that held no count
        return None
    return total, runs


def _write_ledger(root: Path, total: int, runs: int) -> None:
    """Overwrite the total and the count in place: no new file and no rename.

    Each run ends with this write, and on a busy disk creating a file and renaming
    it over another each waited for the file system's journal (10 ms once here).
    An update lost or torn (two runs ending at once) only makes the ledger wrong
    until the next run sees its count differ and measures everything again (prune).
    """
    try:
        fd = os.open(root / _LEDGER, os.O_WRONLY | os.O_CREAT, 0o644)
    except OSError:
        return  # the next run measures everything again
    try:
        os.pwrite(fd, b"%0*d %0*d" % (_LEDGER_DIGITS, total, _LEDGER_DIGITS, runs), 0)
    except OSError:
        return
    finally:
        os.close(fd)


def _run_names(root: Path) -> set[str]:
    """The runs' directory names: one listing, no stat (what :meth:`RunHistory.entries`
    lists, unsorted)."""
    try:
        with os.scandir(root) as found:
            return {e.name for e in found if not e.name.startswith(".") and e.is_dir()}
    except OSError:
        return set()


def _cap_from_env() -> int:
    raw = os.environ.get(CAP_ENV)
    if not raw:
        return DEFAULT_CAP_BYTES
    try:
        megabytes = float(raw)
    except ValueError:
        raise UsageError(f"{CAP_ENV} must be a number of MB, got {raw!r}") from None
    if megabytes <= 0:
        raise UsageError(f"{CAP_ENV} must be positive, got {raw!r}")
    return int(megabytes * 2**20)


def _size(path: Path) -> int:
    """Bytes in a run's directory (its files sit at the top; nothing nests)."""
    total = 0
    try:
        items = list(os.scandir(path))
    except OSError:
        return 0  # removed while we looked
    for item in items:
        try:
            total += item.stat(follow_symlinks=False).st_size
        except FileNotFoundError:
            continue  # removed while we looked (a trace renamed into place)
    return total


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
