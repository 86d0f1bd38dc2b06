"""Long texts in the page: shown folded, stored once, compressed, within a size budget.

A text up to ``INLINE_CHARS`` goes into the page as it is.  A longer one
goes in as its first ``HEAD_CHARS`` characters plus its full length, and the
whole text is kept once (identical texts share one copy) gzip-compressed and
base64-encoded; the page inflates it with the browser's DecompressionStream
when a person unfolds it.  Once the compressed copies reach ``budget_bytes``
further long texts keep only their head and tail, and the page says so: the
trace file still has them.  The texts the page shows as they are (short ones
whole, long ones' heads) have a budget too, ``inline_chars``: past it, a text
longer than ``TIGHT_INLINE`` folds to a ``TIGHT_HEAD`` head, so thousands of
bridge calls with long prompts cannot grow the page without bound.  That is
what keeps a 10,000-sub-query page under about 10 MB instead of hundreds.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
from typing import Any

__all__ = ["HEAD_CHARS", "INLINE_CHARS", "TextStore"]

INLINE_CHARS = 1_500
HEAD_CHARS = 1_000
TAIL_CHARS = 500
DEFAULT_BUDGET = 6 * 2**20
# Past DEFAULT_INLINE characters shown, texts fold sooner and to a shorter head.
DEFAULT_INLINE = 3 * 2**19
TIGHT_INLINE = 300
TIGHT_HEAD = 200
TIGHT_TAIL = 100


class TextStore:
    """Turns texts into page values: a ``str``, or a folded-text dict."""

    def __init__(self, budget_bytes: int = DEFAULT_BUDGET,
                 inline_chars: int = DEFAULT_INLINE) -> None:
        self.blobs: list[str] = []
        self._index: dict[bytes, int] = {}
        self._budget = budget_bytes
        self._inline_budget = inline_chars
        self.used = 0
        self.shown = 0  # characters the page shows unfolded: short texts, heads and tails
        self.dropped = 0  # long texts whose full copy did not fit the budget

    def add(self, text: str | None) -> str | dict[str, Any] | None:
        """The page value for ``text``.

        A folded text is ``{"n": length, "head": first chars, "b": blob index}``,
        or ``{"n", "head", "tail", "b": -1}`` when its full copy is not in the page.
        """
        if text is None:
            return None
        tight = self.shown >= self._inline_budget
        inline, head = (TIGHT_INLINE, TIGHT_HEAD) if tight else (INLINE_CHARS, HEAD_CHARS)
        if len(text) <= inline:
            self.shown += len(text)
            return text
        digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        index = self._index.get(digest)
        if index is None:
            packed = base64.b64encode(
                gzip.compress(text.encode("utf-8", "surrogatepass"), compresslevel=6, mtime=0)
            ).decode("ascii")
            # What the page shows counts too: the two together stay within the budget.
            if self.used + self.shown + len(packed) > self._budget:
                self.dropped += 1
                tail = TIGHT_TAIL if tight else TAIL_CHARS
                self.shown += head + tail
                return {"n": len(text), "head": text[:head], "tail": text[-tail:], "b": -1}
            index = self._index[digest] = len(self.blobs)
            self.blobs.append(packed)
            self.used += len(packed)
        self.shown += head
        return {"n": len(text), "head": text[:head], "b": index}
