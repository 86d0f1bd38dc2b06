"""Where each provider's key comes from, and which endpoints cannot work without one.

A hosted API answers 401 to a request without a key; rather than send one
request to learn that, ``rlm run`` checks first and names the variables to
set.  Self-hosted endpoints (vLLM, llama.cpp, Ollama, a fixture server) often
need no key, so only the well-known hosted APIs are checked.
"""

from __future__ import annotations

import httpx2

from rlm._config import RunConfig
from rlm._spelling import give_key
from rlm._url_userinfo import redact_url
from rlm.providers.anthropic import DEFAULT_BASE_URL as ANTHROPIC_BASE_URL

__all__ = ["HOSTED_APIS", "default_base_url", "key_variables", "missing_key_message"]

OPENAI_BASE_URL = "https://api.openai.com/v1"

#: Hosts that always require a key.
HOSTED_APIS = frozenset(
    {
        "api.openai.com",
        "api.anthropic.com",
        "openrouter.ai",
        "api.together.xyz",
        "api.groq.com",
        "api.mistral.ai",
        "api.deepseek.com",
        "api.fireworks.ai",
        "generativelanguage.googleapis.com",
    }
)


def default_base_url(provider: str) -> str | None:
    """The vendor's own endpoint for ``provider`` (None for the fixture model)."""
    return {"openai": OPENAI_BASE_URL, "anthropic": ANTHROPIC_BASE_URL}.get(provider)


def key_variables(provider: str) -> tuple[str, str]:
    """The environment variables a key is read from, in order."""
    return ("RLM_API_KEY", "ANTHROPIC_API_KEY" if provider == "anthropic" else "OPENAI_API_KEY")


def missing_key_message(config: RunConfig) -> str | None:
    """What to set, when ``config`` has no key but an endpoint it uses needs one."""
    if config.api_key or not config.over_http:
        return None
    base = config.base_url or default_base_url(config.provider) or ""
    sub = config.sub_base_url or base
    for url in (sub,) if config.provider == "fixture" else (base, sub):
        if url and httpx2.URL(url).host in HOSTED_APIS:
            return f"no API key for {redact_url(url)}: {give_key(key_variables(config.provider))}"
    return None
