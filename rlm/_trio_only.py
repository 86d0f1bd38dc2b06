"""The async entries run under trio: awaited from asyncio they say so, plainly.

Without this check a coroutine of ours awaited under asyncio fails deep in
trio ("must be called from async context", an AttributeError on a run
context): true, but no help to someone who only used ``asyncio.run``.
"""

from __future__ import annotations

import trio

from rlm.errors import UsageError

__all__ = ["require_trio"]


def require_trio(entry: str, instead: str) -> None:
    """UsageError naming ``entry`` and what to do ``instead``, unless trio is running."""
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        raise UsageError(
            f"{entry} runs under trio, not asyncio or another event loop: call it inside "
            f"trio.run(...), or from asyncio {instead}"
        ) from None
