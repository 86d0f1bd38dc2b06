"""Reading the fixture server's everyday requests without h11.

h11 reads a request in ~60-100 us of Python (its state machine, a regular
expression per header line, the header normalization): the larger part of
the fixture server's CPU per request, spent on the machine a benchmark
measures the runtime on.  Almost every request the server sees is *plain*: a
keep-alive HTTP/1.1 ``GET`` or ``POST`` with one ``Host``, at most one
``Content-Length`` and nothing h11 treats specially.  :func:`parse_plain`
reads those with one regular expression over the head, which accepts only
what h11 accepts, and reads it as h11 would (lower-case names, values
without their surrounding whitespace).  Anything else, from ``Expect:
100-continue`` to garbage, is left to h11, so every refusal is still h11's.
"""

from __future__ import annotations

import enum
import re
from typing import NamedTuple

__all__ = ["MAX_PLAIN_HEAD", "Need", "PlainRequest", "RequestHead", "parse_plain"]

#: A head this long that has not ended yet is left to h11 (and its own limit, 16 KiB).
MAX_PLAIN_HEAD = 8 * 1024

# h11's grammar (h11/_abnf.py: RFC 7230), narrowed: the methods GET and POST,
# HTTP/1.1, CRLF line ends, no obsolete line folding.  (Possessive quantifiers,
# a third faster: each piece ends where the next one's characters begin, so
# there is never anything to backtrack to.)
_TOKEN = rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]++"
_FIELD_VCHAR = rb"[^\x00\s]"
_FIELD_VALUE = rb"(?:" + _FIELD_VCHAR + rb"++(?:[ \t]++" + _FIELD_VCHAR + rb"++)*+)?+"
_HEAD = re.compile(
    rb"(GET|POST) ([\x21-\x7e]++) HTTP/1\.1\r\n"
    rb"((?:" + _TOKEN + rb":[ \t]*+" + _FIELD_VALUE + rb"[ \t]*+\r\n)*+)\r\n"
)
#: Where h11 sees a head end (h11/_receivebuffer.py): the first blank line, CRLF or LF.
_BLANK_LINE = re.compile(rb"\n\r?\n")
#: Headers after which h11 does more than read a body of a known length: left to it.
_SPECIAL = frozenset({b"transfer-encoding", b"expect", b"upgrade"})
_MAX_LENGTH_DIGITS = 20  # h11's CONTENT_LENGTH_MAX_DIGITS


class RequestHead(NamedTuple):
    """A request's method, target and headers (lower-case names), as the server routes it."""

    method: bytes
    target: bytes
    headers: list[tuple[bytes, bytes]]


class PlainRequest(NamedTuple):
    """A whole plain request at the start of a buffer: its head, and where its body
    starts and ends."""

    head: RequestHead
    body_start: int
    end: int


class Need(enum.Enum):
    """What :func:`parse_plain` needs when the buffer does not hold a whole plain request."""

    MORE = "more"  # more bytes: what there is may still start a plain request
    H11 = "h11"  # h11: it is not a plain request (or not one this server reads itself)


def parse_plain(buffer: bytes | bytearray, max_body: int) -> PlainRequest | Need:
    """The plain request at the start of ``buffer``, or what is needed to read it.

    A body longer than ``max_body`` is left to h11 (the server answers it 413).
    """
    if not buffer:
        return Need.MORE
    if buffer[0] not in b"GP":  # h11 may refuse it at once: let it
        return Need.H11
    blank = _BLANK_LINE.search(buffer)
    if blank is None:
        return Need.MORE if len(buffer) <= MAX_PLAIN_HEAD else Need.H11
    body_start = blank.end()
    if buffer[body_start - 4:body_start] != b"\r\n\r\n" or body_start > MAX_PLAIN_HEAD:
        return Need.H11  # a bare LF ends it (or a line), for h11
    match = _HEAD.fullmatch(buffer, 0, body_start)
    if match is None:
        return Need.H11
    headers: list[tuple[bytes, bytes]] = []
    length = -1
    hosts = 0
    for line in match.group(3).split(b"\r\n")[:-1]:
        raw_name, _, raw_value = line.partition(b":")
        name = raw_name.lower()
        value = raw_value.strip(b" \t")
        if name in _SPECIAL:
            return Need.H11
        if name == b"content-length":
            if length >= 0 or not value.isdigit() or len(value) > _MAX_LENGTH_DIGITS:
                return Need.H11  # repeated, a list, or not a number: h11 decides
            length = int(value)
        elif name == b"host":
            hosts += 1
        elif name == b"connection" and value.lower() != b"keep-alive":
            return Need.H11  # h11 closes after the reply, or more
        headers.append((name, value))
    if hosts != 1 or length > max_body:
        return Need.H11
    end = body_start + max(length, 0)
    if len(buffer) < end:
        return Need.MORE
    return PlainRequest(RequestHead(match.group(1), match.group(2), headers), body_start, end)
