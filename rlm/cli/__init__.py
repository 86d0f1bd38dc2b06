"""The ``rlm`` command line.  Each command lives in its own module, imported when used
(the table is ``COMMANDS`` in ``_group.py``)."""

from __future__ import annotations

from rlm.cli._group import main

__all__ = ["main"]
