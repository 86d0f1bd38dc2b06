"""The ``rlm`` command line.  Each command lives in its own module, imported when used
(the table is ``COMMANDS`` in ``_group.py``).

``main`` is the click group (what tests and embedders call); ``console_main`` is the
executable's entry (``_console.py``).  Both are imported on first use, so that the
executable can start a run's sandbox zygote before click is imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlm.cli._console import console_main
    from rlm.cli._group import main

__all__ = ["console_main", "main"]


def __getattr__(name: str) -> Any:
    if name == "main":
        from rlm.cli._group import main

        return main
    if name == "console_main":
        from rlm.cli._console import console_main

        return console_main
    raise AttributeError(f"module 'rlm.cli' has no attribute {name!r}")
