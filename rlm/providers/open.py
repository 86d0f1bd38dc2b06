"""Opening the providers a configuration names, over one shared HTTP client."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from rlm._config import RunConfig
from rlm.providers.base import Lane, Provider
from rlm.providers.fixture import FixtureOptions

__all__ = ["open_providers"]


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
    from rlm.providers.anthropic import AnthropicProvider
    from rlm.providers.keys import default_base_url
    from rlm.providers.openai import OpenAIProvider, make_http_client

    kind = AnthropicProvider if config.provider == "anthropic" else OpenAIProvider
    base_url = config.base_url or default_base_url(config.provider) or ""
    urls = [base_url, config.sub_base_url or base_url]
    async with make_http_client(
        max_connections=config.max_concurrent,
        request_timeout=config.request_timeout,
        tls=any(url.startswith("https://") for url in urls),
    ) as client:
        idle = config.stream_idle_timeout
        yield {
            "root": kind(client, urls[0], config.api_key, stream_idle_timeout=idle),
            "sub": kind(client, urls[1], config.api_key, stream_idle_timeout=idle),
        }
