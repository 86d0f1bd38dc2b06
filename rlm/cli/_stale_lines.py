"""The stderr lines for ``stale_recovery``: one per holder whose claims were reopened.

A worker killed while it held a claim of a thousand tasks leaves a thousand
claims to reopen; each is an event and a journal_log row, but a person wants to
read one line saying what happened, not a thousand.
"""

from __future__ import annotations

from collections.abc import Sequence

from rlm.journal import Recovered

__all__ = ["lost_line", "recovery_lines"]

#: Runs of task numbers named in one line before the rest are counted.
_RUNS_SHOWN = 6


def recovery_lines(found: Sequence[Recovered]) -> list[str]:
    """One line per (volley, holder, reason), in the order the holders were first met."""
    groups: dict[tuple[str, str, str], list[Recovered]] = {}
    for recovered in found:
        key = (recovered.volley_id, str(recovered.owner), recovered.reason)
        groups.setdefault(key, []).append(recovered)
    return [_line(group) for group in groups.values()]


def _line(group: list[Recovered]) -> str:
    first = group[0]
    idle = sorted(r.idle_s for r in group)
    silent = f"{idle[0]:.1f}s" if idle[-1] - idle[0] < 0.05 else f"{idle[0]:.1f}–{idle[-1]:.1f}s"
    why = f"{first.reason}; held by {first.owner}, silent {silent}"
    if len(group) == 1:
        return f"stale_recovery: volley {first.volley_id} task {first.index} reopened ({why})"
    tasks = _runs(sorted(r.index for r in group))
    return f"stale_recovery: volley {first.volley_id}: {len(group)} tasks reopened ({tasks}; {why})"


def lost_line(volley_id: str, indices: list[int], late_s: float) -> str:
    """What a worker whose claims were reopened while its heartbeat was late says."""
    return (
        f"note: volley {volley_id}: this worker's heartbeat was {late_s:.0f}s late (was the "
        f"process paused?) and {len(indices)} of its claims were reopened for other workers "
        f"({_runs(indices)}): it does not send them"
    )


def _runs(indices: list[int]) -> str:
    """``1–4, 7, 9–12`` (at most a few runs, then how many tasks more)."""
    runs: list[tuple[int, int]] = []
    for index in indices:
        if runs and index == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], index)
        else:
            runs.append((index, index))
    shown = [str(a) if a == b else f"{a}–{b}" for a, b in runs[:_RUNS_SHOWN]]
    rest = sum(b - a + 1 for a, b in runs[_RUNS_SHOWN:])
    return "tasks " + ", ".join(shown) + (f" and {rest} more" if rest else "")
