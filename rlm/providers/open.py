"""Opening the providers a configuration names, over one shared HTTP client."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from rlm._config import RunConfig
from rlm.errors import SettingError
from rlm.providers.base import Lane, Provider
from rlm.providers.fixture import FixtureOptions

__all__ = ["bills_cache_writes", "open_providers"]


def bills_cache_writes(config: RunConfig) -> bool:
    """Whether ``config``'s provider bills writing a prompt-cache prefix above the input
    rate (Anthropic), as the gate's budget reserves it: what a volley estimate prices."""
    if config.provider != "anthropic":
        return False
    from rlm.providers.anthropic import AnthropicProvider  # only when it is the provider

    return AnthropicProvider.bills_cache_writes


@asynccontextmanager
async def open_providers(
    config: RunConfig, fixture: FixtureOptions | None = None
) -> AsyncIterator[Mapping[Lane, Provider]]:
    """The root and sub providers of ``config``; the HTTP client closes on exit.

    ``fixture`` paces the fixture model when ``config.provider`` is ``fixture``.
    """
    if config.provider == "fixture":
        model = (fixture or FixtureOptions()).provider()
        yield {"root": model, "sub": model}
        return
    # Imported here: httpx and the HTTP providers take a while to load, and a fixture run
    # never needs them.
    import trio

    from rlm.providers._one_write import OneWriteBackend
    from rlm.providers._proxy import proxied_client
    from rlm.providers._warm import WarmConnections
    from rlm.providers.anthropic import AnthropicProvider
    from rlm.providers.keys import default_base_url, missing_key_message
    from rlm.providers.openai import OpenAIProvider, make_http_client

    # A hosted API answers 401 to a request without a key: say so before sending one
    # (the command line checks this itself, first; this is the Python API's check).
    problem = missing_key_message(config)
    if problem is not None:
        raise SettingError(problem)
    kind = AnthropicProvider if config.provider == "anthropic" else OpenAIProvider
    base_url = config.base_url or default_base_url(config.provider) or ""
    urls = [base_url, config.sub_base_url or base_url]
    # Pre-opened connections, each sending a request in one write (see the modules).
    warm = WarmConnections(OneWriteBackend())
    # Through a proxy the environment names (HTTP_PROXY...), httpx2's standard client.
    proxied = proxied_client(
        urls,
        max_connections=config.max_concurrent,
        request_timeout=config.request_timeout,
    )
    async with proxied or make_http_client(
        max_connections=config.max_concurrent,
        request_timeout=config.request_timeout,
        tls=any(url.startswith("https://") for url in urls),
        network=warm,
    ) as client, trio.open_nursery() as nursery:
        try:
            # While the root's first step is generated, open the connections the sub
            # lane's first wave will want (one per permit; no request is sent).
            origin = None if proxied else _origin(urls[1])
            if origin is not None:
                sub_permits = config.max_concurrent - config.root_permits
                nursery.start_soon(warm.open, *origin, sub_permits)
            idle = config.stream_idle_timeout
            root = kind(client, urls[0], config.api_key, stream_idle_timeout=idle)
            # One provider serves both lanes when they go to the same URL: it holds no
            # per-lane state, and each costs ~0.3 ms to make (URL parsing), on the way
            # to the root's first request.
            sub = root if urls[1] == urls[0] else kind(
                client, urls[1], config.api_key, stream_idle_timeout=idle
            )
            yield {"root": root, "sub": sub}
        finally:
            nursery.cancel_scope.cancel()
            await warm.aclose()


def _origin(url: str) -> tuple[str, int] | None:
    """The host and port the HTTP pool dials for ``url`` (None if it is not HTTP)."""
    import httpx2

    try:
        parsed = httpx2.URL(url)
    except httpx2.InvalidURL:
        return None
    if parsed.scheme not in ("http", "https") or not parsed.raw_host:
        return None
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return parsed.raw_host.decode("ascii"), port
