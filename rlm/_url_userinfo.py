"""A URL's credentials never leave the process: its ``user:password@`` and the values
of its secret-looking query parameters (``?api_key=sk-...``).

``http://alice:s3cret@host/v1`` is a usual way to reach a local model server
behind a proxy with Basic auth; the providers send those credentials as an
``Authorization: Basic`` header.  Some gateways take a key in the query instead
(``?api_key=...``, ``?sig=...``).  Everywhere else a base URL is shown or kept
(errors, the trace's ``run_started``, a journal's volley settings, a saved
session, ``config show``, a config's repr) it is :func:`redact_url`'ed to
``http://***@host/v1?api_key=***``.  A stored URL that was redacted cannot be
used to send: :func:`redacted` (the userinfo) and :func:`redacted_params` (the
query) find it, and the configuration asks for the URL again
(``RunConfig.validate``).
"""

from __future__ import annotations

import re
from urllib.parse import unquote_plus

__all__ = ["redact_url", "redacted", "redacted_params"]

# The scheme, then the authority's userinfo: everything up to its last "@" before
# the path, query or fragment begins.  Without a scheme ("alice:pw@host/v1", a
# mistyped setting that an error message quotes) the userinfo goes all the same.
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)?[^/?#]*@")
_REDACTED = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://\*\*\*@")
# The query: after the first "?", up to the fragment.  Its parameters are split by
# hand (not urlsplit/urlencode) so that the rest of the URL stays byte for byte.
_QUERY = re.compile(r"^([^?#]*\?)([^#]*)(.*)$", re.DOTALL)
# A parameter is secret when its name, lower-cased and without separators, ends in
# one of these: key, api_key, apikey, x-api-key, access_token, client_secret,
# password, sig, X-Amz-Signature, X-Amz-Credential...
_SECRET_ENDINGS = ("key", "token", "secret", "password", "passwd", "pwd", "sig",
                   "signature", "credential", "auth")
_MASK = "***"


def _secret_name(name: str) -> bool:
    return re.sub(r"[^a-z0-9]", "", unquote_plus(name).lower()).endswith(_SECRET_ENDINGS)


def _redact_query(query: str) -> str:
    params = []
    for param in query.split("&"):
        name, sep, value = param.partition("=")
        params.append(f"{name}={_MASK}" if sep and value and _secret_name(name) else param)
    return "&".join(params)


def redact_url(url: str) -> str:
    """``url`` with its ``user:password@`` (if any) replaced by ``***@`` and the values of
    its secret-looking query parameters by ``***``; the rest unchanged."""
    url = _USERINFO.sub(r"\1***@", url, count=1)
    parts = _QUERY.match(url)
    if parts is None:
        return url
    head, query, tail = parts.groups()
    return f"{head}{_redact_query(query)}{tail}"


def redacted(url: str | None) -> bool:
    """Whether ``url`` is one whose ``user:password`` :func:`redact_url` took out."""
    return url is not None and _REDACTED.match(url) is not None


def redacted_params(url: str | None) -> list[str]:
    """The query parameters of ``url`` whose values :func:`redact_url` took out."""
    parts = None if url is None else _QUERY.match(url)
    if parts is None:
        return []
    named = (param.partition("=") for param in parts.group(2).split("&"))
    return [name for name, _, value in named if value == _MASK and _secret_name(name)]
