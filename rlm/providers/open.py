"""Opening the providers a configuration names, over one shared HTTP client."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from rlm._config import RunConfig
from rlm.errors import SettingError
from rlm.providers.base import Lane, Provider
from rlm.providers.fixture import FixtureProvider

if TYPE_CHECKING:
    import httpx2

    from rlm.providers.batch import BatchService

__all__ = ["bills_cache_writes", "check_batch_service", "open_batch_service", "open_providers"]


def bills_cache_writes(config: RunConfig) -> bool:
    """Whether ``config``'s provider bills writing a prompt-cache prefix above the input
    rate (Anthropic), as the gate's budget reserves it: what a volley estimate prices."""
    if config.provider != "anthropic":
        return False
    from rlm.providers.anthropic import AnthropicProvider  # only when it is the provider

    return AnthropicProvider.bills_cache_writes


@asynccontextmanager
async def open_providers(
    config: RunConfig,
    *,
    transport: httpx2.AsyncBaseTransport | None = None,
) -> AsyncIterator[Mapping[Lane, Provider]]:
    """The root and sub providers of ``config``, over one HTTP client that closes on exit.

    The fixture model (``config.provider`` ``fixture``) runs at no latency; a paced
    one is a provider of its own (``FixtureProvider(sub_latency=...)``), given as such.
    With a ``sub_base_url``, the fixture is the root and sub-queries go to that
    OpenAI-compatible endpoint (``sub_model``): the easiest way to try a local model as a
    sub-model, the root's steps scripted.
    The client is built from ``config``'s limits and timeouts
    (:func:`rlm.providers._http.make_http_client`); ``transport`` replaces the network
    under it (tests pass an ``httpx2.MockTransport``).
    """
    if not config.over_http:
        model = FixtureProvider()
        yield {"root": model, "sub": model}
        return
    # Imported here: httpx2 and the HTTP providers take a while to load, and a fixture
    # run never needs them.
    from rlm.providers._http import ResponseLimits, make_http_client
    from rlm.providers.anthropic import AnthropicProvider
    from rlm.providers.keys import default_base_url, missing_key_message
    from rlm.providers.openai import OpenAIProvider

    # A hosted API answers 401 to a request without a key: say so before sending one
    # (the command line checks this itself, first; this is the Python API's check).
    problem = missing_key_message(config)
    if problem is not None:
        raise SettingError(problem)
    kind = AnthropicProvider if config.provider == "anthropic" else OpenAIProvider
    base_url = config.base_url or default_base_url(config.provider) or ""
    sub_url = config.sub_base_url or base_url
    async with make_http_client(
        max_connections=config.max_concurrent,
        request_timeout=config.request_timeout,
        transport=transport,
        urls=(base_url, sub_url),
    ) as client:
        limits = ResponseLimits.of(config)
        root: Provider
        if config.provider == "fixture":  # the scripted root, a real sub-model
            root = FixtureProvider()
        else:
            root = kind(client, base_url, config.api_key, limits=limits)
        # One provider serves both lanes when they go to the same URL: it holds no
        # per-lane state.
        sub = root if sub_url == base_url else kind(
            client, sub_url, config.api_key, limits=limits
        )
        yield {"root": root, "sub": sub}


def check_batch_service(config: RunConfig) -> None:
    """Raise SettingError when ``config``'s provider has no batch service (the built-in
    fixture model): said before a volley is recorded, not once it should be sent."""
    if config.provider == "fixture":
        raise SettingError(
            "the built-in fixture model has no batch service; run `rlm fixture-server`, "
            "which serves both batch APIs, and send to it with <provider=openai> "
            "<base_url=http://127.0.0.1:8765/v1> (or <provider=anthropic>)"
        )


@asynccontextmanager
async def open_batch_service(
    config: RunConfig,
    *,
    transport: httpx2.AsyncBaseTransport | None = None,
) -> AsyncIterator[BatchService]:
    """The batch service of ``config``'s provider at the volley's endpoint (the sub-query
    one, where a live volley's tasks go), over an HTTP client that closes on exit.

    The fixture model has none: its server (``rlm fixture-server``) serves both
    services, so a fixture batch volley names it as an ``openai`` or ``anthropic``
    endpoint.
    """
    check_batch_service(config)
    from rlm.providers._http import ResponseLimits, make_http_client
    from rlm.providers.batch_anthropic import AnthropicBatches
    from rlm.providers.batch_openai import OpenAIBatches
    from rlm.providers.keys import default_base_url, missing_key_message

    problem = missing_key_message(config)
    if problem is not None:
        raise SettingError(problem)
    base_url = config.base_url or default_base_url(config.provider) or ""
    kind = AnthropicBatches if config.provider == "anthropic" else OpenAIBatches
    async with make_http_client(
        max_connections=4, request_timeout=config.request_timeout, transport=transport,
        urls=(config.sub_base_url or base_url,),
    ) as client:
        yield kind(client, config.sub_base_url or base_url, config.api_key,
                   limits=ResponseLimits.of(config))
