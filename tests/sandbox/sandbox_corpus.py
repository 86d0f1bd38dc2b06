"""The sandbox's two-sided corpus (data only; tests/sandbox/test_sandbox_corpus.py runs it).

``ORDINARY``: analysis code written the way current models write it.  Every
snippet must run; each checks its own results with ``assert``.  ``PROBES``:
attacks grouped by route, each of which must be refused.  A policy change
shows its cost on both sides here.
"""


from __future__ import annotations

from tests.sandbox.corpus_ordinary_classes import ORDINARY_CLASSES
from tests.sandbox.corpus_ordinary_data import ORDINARY_DATA
from tests.sandbox.corpus_probes import PROBES as LANGUAGE_PROBES
from tests.sandbox.corpus_probes_stdlib import STDLIB_PROBES

__all__ = ["CONTEXT", "ORDINARY", "PROBES"]

CONTEXT = """\
2024-03-01 10:00:01 INFO user=alice action=login ip=10.0.0.1
2024-03-01 10:02:13 ERROR user=bob action=upload size=1024 msg="disk full"
2024-03-01 10:05:00 WARN user=alice action=download size=2048
2024-03-02 09:15:42 INFO user=carol action=login ip=10.0.0.7
2024-03-02 11:20:05 ERROR user=alice action=upload size=512 msg="timeout"
{"event": "summary", "count": 5, "users": ["alice", "bob", "carol"]}
"""

#: Every ordinary snippet, in the order the corpus lists them.
ORDINARY: dict[str, str] = {**ORDINARY_DATA, **ORDINARY_CLASSES}

#: Every probe, by route.
PROBES: dict[str, list[str]] = {**LANGUAGE_PROBES, **STDLIB_PROBES}
