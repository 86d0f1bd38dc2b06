"""A proxy named by the environment (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``,
``NO_PROXY``), as httpx2's own client reads it.

The run's own client (:func:`rlm.providers._http.make_http_client`) has an
explicit transport and posts on its pool directly, so it never reads proxy
variables.  When httpx2's lookup of the environment finds a proxy for one of a
run's endpoints, the run takes a standard ``httpx2.AsyncClient`` instead: it
sends every request through that proxy (and to endpoints ``NO_PROXY`` names
directly), and its providers post through it, not on a pool of their own.
"""

from __future__ import annotations

from collections.abc import Sequence

import httpx2

# httpx2's own reading of the variables and its matching of a URL against them, as
# its client applies them (the same precedence: the most specific pattern first).
from httpx2._utils import URLPattern, get_environment_proxies

__all__ = ["proxied_client"]

_CONNECT_TIMEOUT = 30.0  # as the run's own client's


def proxied_client(
    urls: Sequence[str], *, max_connections: int, request_timeout: float
) -> httpx2.AsyncClient | None:
    """A client that sends through the environment's proxy when it names one for any of
    ``urls``; None when none of them is proxied (the run's own client then serves)."""
    mounts = sorted(
        ((URLPattern(pattern), proxy) for pattern, proxy in get_environment_proxies().items()),
        key=lambda mount: mount[0],
    )
    if not any(_proxy_for(url, mounts) for url in urls):
        return None
    return httpx2.AsyncClient(
        timeout=httpx2.Timeout(request_timeout, connect=_CONNECT_TIMEOUT),
        limits=httpx2.Limits(max_connections=max_connections),
        follow_redirects=False,
    )


def _proxy_for(url: str, mounts: list[tuple[URLPattern, str | None]]) -> str | None:
    try:
        target = httpx2.URL(url)
    except httpx2.InvalidURL:
        return None
    return next((proxy for pattern, proxy in mounts if pattern.matches(target)), None)
