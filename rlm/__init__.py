"""rlm: a fast, bounded and sandboxed runtime for recursive language models.

>>> from rlm import RLM
>>> result = RLM(provider="fixture").completion("What is the magic number?", text)
>>> result.answer, result.status, result.usage.llm_calls

The exceptions are imported with the package; the rest of the public API is
imported on first use (PEP 562), so ``import rlm`` and every ``rlm`` command
start without loading trio, httpx or the runtime until they need them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rlm.errors import (
    AuthenticationError,
    BudgetExceeded,
    ClaimLost,
    ContextLengthError,
    ExecutionTimeout,
    Interrupted,
    JournalError,
    LimitExceeded,
    ProviderConnectionError,
    ProviderError,
    ProviderResponseError,
    ProviderStatusError,
    ProviderTimeout,
    QuotaExceededError,
    RateLimitError,
    RLMError,
    RunTimeout,
    SandboxCrashed,
    SandboxError,
    SettingError,
    UnknownVolleyError,
    UsageError,
)

if TYPE_CHECKING:
    from rlm._api import RLM
    from rlm._config import RunConfig, SessionOptions, VolleyOptions
    from rlm._events import Event
    from rlm._result import RunResult
    from rlm._run.tools import make_tool
    from rlm._traffic.usage import Usage

#: The one place the version is written (pyproject reads it from here).
__version__ = "0.1.0"

__all__ = [
    "RLM",
    "AuthenticationError",
    "BudgetExceeded",
    "ClaimLost",
    "ContextLengthError",
    "Event",
    "ExecutionTimeout",
    "Interrupted",
    "JournalError",
    "LimitExceeded",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderResponseError",
    "ProviderStatusError",
    "ProviderTimeout",
    "QuotaExceededError",
    "RLMError",
    "RateLimitError",
    "RunConfig",
    "RunResult",
    "RunTimeout",
    "SandboxCrashed",
    "SandboxError",
    "SessionOptions",
    "SettingError",
    "UnknownVolleyError",
    "Usage",
    "UsageError",
    "VolleyOptions",
    "make_tool",
]

# Public name → the module that defines it, imported when the name is first read.
_LAZY = {
    "RLM": "rlm._api",
    "RunConfig": "rlm._config",
    "SessionOptions": "rlm._config",
    "VolleyOptions": "rlm._config",
    "Event": "rlm._events",
    "RunResult": "rlm._result",
    "make_tool": "rlm._run.tools",
    "Usage": "rlm._traffic.usage",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rlm' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later reads skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
