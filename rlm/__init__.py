"""rlm: a fast, bounded and sandboxed runtime for recursive language models.

>>> from rlm import RLM
>>> result = RLM(provider="fixture").completion("What is the magic number?", text)
>>> result.answer, result.status, result.usage.llm_calls
"""

from rlm._api import RLM
from rlm._config import RunConfig
from rlm._events import Event
from rlm._result import RunResult
from rlm._traffic.usage import Usage
from rlm.errors import (
    AuthenticationError,
    BudgetExceeded,
    ExecutionTimeout,
    Interrupted,
    JournalError,
    LimitExceeded,
    ProviderConnectionError,
    ProviderError,
    ProviderResponseError,
    ProviderStatusError,
    QuotaExceededError,
    RateLimitError,
    RLMError,
    RunTimeout,
    SandboxCrashed,
    SandboxError,
    UsageError,
)

__all__ = [
    "RLM",
    "AuthenticationError",
    "BudgetExceeded",
    "Event",
    "ExecutionTimeout",
    "Interrupted",
    "JournalError",
    "LimitExceeded",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderResponseError",
    "ProviderStatusError",
    "QuotaExceededError",
    "RLMError",
    "RateLimitError",
    "RunConfig",
    "RunResult",
    "RunTimeout",
    "SandboxCrashed",
    "SandboxError",
    "Usage",
    "UsageError",
]
