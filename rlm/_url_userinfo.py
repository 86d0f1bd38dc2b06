"""A URL's ``user:password@`` (HTTP Basic credentials) never leaves the process.

``http://alice:s3cret@host/v1`` is a usual way to reach a local model server
behind a proxy with Basic auth; the providers send those credentials as an
``Authorization: Basic`` header.  Everywhere else a base URL is shown or kept
(errors, the trace's ``run_started``, a journal's volley settings, a saved
session) it is :func:`redact_url`'ed to ``http://***@host/v1``.  A stored URL
that was redacted cannot be used to send: :func:`redacted` finds it, and the
configuration asks for the URL again (``RunConfig.validate``).
"""

from __future__ import annotations

import re

__all__ = ["redact_url", "redacted"]

# The scheme, then the authority's userinfo: everything up to its last "@" before
# the path, query or fragment begins.  Without a scheme ("alice:pw@host/v1", a
# mistyped setting that an error message quotes) the userinfo goes all the same.
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)?[^/?#]*@")
_REDACTED = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://\*\*\*@")


def redact_url(url: str) -> str:
    """``url`` with its ``user:password@`` (if any) replaced by ``***@``."""
    return _USERINFO.sub(r"\1***@", url, count=1)


def redacted(url: str | None) -> bool:
    """Whether ``url`` is one whose credentials :func:`redact_url` took out."""
    return url is not None and _REDACTED.match(url) is not None
