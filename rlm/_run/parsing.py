"""Reading a root model's reply: code blocks and FINAL directives."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

__all__ = [
    "BlockSplitter",
    "FinalDirective",
    "find_code_blocks",
    "find_final",
    "strip_code_blocks",
]

# ```repl or ```python (```py too), up to the next fence on a line of its own: a ``` inside
# a string literal (print("```")) does not end the block.
_CLOSING_FENCE = r"^[ \t]*```[ \t]*\r?$"
_CODE_BLOCK = re.compile(r"```(?:repl|python|py)[ \t]*\r?\n(.*?)" + _CLOSING_FENCE,
                         re.DOTALL | re.MULTILINE)
_ANY_FENCE = re.compile(r"^[ \t]*```.*?(?:" + _CLOSING_FENCE + r"|\Z)", re.DOTALL | re.MULTILINE)
_FINAL_VAR = re.compile(r"^[ \t]*FINAL_VAR\([ \t]*([\"']?)([A-Za-z_]\w*)\1[ \t]*\)", re.MULTILINE)
_FINAL_LINE = re.compile(r"^[ \t]*FINAL\((.*)\)[ \t]*$", re.MULTILINE)
_FINAL_START = re.compile(r"^[ \t]*FINAL\(", re.MULTILINE)
_FINAL_SPAN = re.compile(r"(.*)\)[ \t]*$", re.DOTALL)


@dataclass(frozen=True, slots=True, eq=False)
class FinalDirective:
    """A FINAL found in the text: either the answer itself or a variable to read."""

    answer: str | None = None
    variable: str | None = None


def find_code_blocks(text: str) -> list[str]:
    """The bodies of every ```repl / ```python block, in order."""
    return [match.group(1) for match in _CODE_BLOCK.finditer(text)]


class BlockSplitter:
    """Finds code blocks in a reply while it streams, each as soon as it closes.

    Feeding the pieces of a reply and then :meth:`close` yields, over all
    calls, exactly ``find_code_blocks(reply)``: a block is reported once the
    line of its closing fence has ended (more text on that line would make it
    no fence), and the search resumes after it, as ``finditer`` does.
    """

    def __init__(self) -> None:
        self._joined = ""
        self._resume = 0

    def feed(self, piece: str) -> list[str]:
        """The blocks that ``piece`` completed, in order."""
        if not piece:
            return []
        self._joined += piece
        return self._scan(complete=False)

    def close(self) -> list[str]:
        """The blocks the end of the reply completed (a closing fence as its last line)."""
        return self._scan(complete=True)

    def _scan(self, complete: bool) -> list[str]:
        blocks = []
        for match in _CODE_BLOCK.finditer(self._joined, self._resume):
            if not complete and match.end() == len(self._joined):
                break  # the fence's line may go on in the next piece
            blocks.append(match.group(1))
            self._resume = match.end()
        return blocks


def strip_code_blocks(text: str) -> str:
    """The reply with every fenced block (of any language) removed."""
    return _ANY_FENCE.sub("", text)


def find_final(text: str) -> FinalDirective | None:
    """The first FINAL(...) or FINAL_VAR(...) line outside code blocks, if any.

    ``FINAL(answer)`` may span several lines; it runs to the last closing
    parenthesis of the reply.  A single quoted literal is unquoted, so
    ``FINAL("42")`` and ``FINAL(42)`` both answer ``42``.
    """
    prose = strip_code_blocks(text)
    var_match = _FINAL_VAR.search(prose)
    start = _FINAL_START.search(prose)
    if var_match and (start is None or var_match.start() <= start.start()):
        return FinalDirective(variable=var_match.group(2))
    if start is None:
        return None
    line = _FINAL_LINE.match(prose, start.start())
    if line:  # the usual case: the answer closes on its own line
        return FinalDirective(answer=_unquote(line.group(1).strip()))
    span = _FINAL_SPAN.match(prose, start.end())
    if span:  # a multi-line answer runs to the last closing parenthesis
        return FinalDirective(answer=_unquote(span.group(1).strip()))
    return None


def _unquote(raw: str) -> str:
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            return raw
        if isinstance(value, str):
            return value
    return raw
