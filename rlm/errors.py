"""The rlm exception tree.

Every error rlm raises derives from :class:`RLMError`.  Third-party exceptions
(httpx2, msgpack, OS errors) are translated where they enter, with the original
kept as ``__cause__``.  ``exit_code`` is what ``rlm`` returns for that error.

::

    RLMError                        exit 1
    ├── UsageError                  exit 2  bad flag, missing or unreadable file, bad input
    │   └── SettingError                    a setting's value (named as the caller spells it)
    ├── ProviderError               exit 1  the LLM endpoint failed
    │   ├── ProviderConnectionError         cannot connect, reset
    │   │   └── ProviderTimeout                 an attempt passed a time limit
    │   ├── ProviderResponseError           reply is not the JSON we expect
    │   └── ProviderStatusError             an HTTP error status
    │       ├── AuthenticationError exit 4  401: the credentials were refused; 403: the
    │       │                               request was forbidden (credentials, policy,
    │       │                               region or model: the server's message says)
    │       ├── QuotaExceededError  exit 3  402, 429 insufficient_quota, 400 credit: no credit
    │       ├── ContextLengthError              400: the request does not fit the model's context
    │       └── RateLimitError              429 (retryable)
    ├── JournalError                exit 1  the journal cannot be opened, is too new, or failed
    │   ├── UnknownVolleyError  exit 2  no volley with that id (``last``: none at all);
    │   │                               also a UsageError
    │   └── ClaimLost                   a paused worker's claim was reopened: not sent
    ├── SandboxError                exit 1  a sandbox process misbehaved
    │   ├── SandboxCrashed                  it exited or broke the frame protocol
    │   └── ExecutionTimeout                one execution passed --exec-timeout
    ├── LimitExceeded               exit 3  a limit ended the run
    │   ├── BudgetExceeded                  the shared ledger refused a request
    │   └── RunTimeout                      the run's wall-clock --timeout passed
    └── Interrupted                 exit 130 Ctrl-C, SIGTERM or SIGHUP stopped the run
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the result module imports this one
    from rlm._result import RunResult

__all__ = [
    "AuthenticationError",
    "BudgetExceeded",
    "ClaimLost",
    "ContextLengthError",
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
    "RunTimeout",
    "SandboxCrashed",
    "SandboxError",
    "SettingError",
    "UnknownVolleyError",
    "UsageError",
]


class RLMError(Exception):
    """Root of every error rlm raises.

    ``ends_run`` is true for errors that stop the whole run wherever they occur
    (refused credentials, no credit, a hard limit); other errors fail only the
    call or the sub-query they happen in.  When a run fails, ``result`` holds
    the :class:`rlm.RunResult` of what the run had (usage, trace) by then.
    """

    exit_code = 1
    ends_run = False
    result: RunResult | None = None


class UsageError(RLMError):
    """The user asked for something impossible: a bad flag, a missing file, bad input."""

    exit_code = 2


#: Renders a setting's name (and, when the message suggests one, a value) in a message.
SettingNamer = Callable[[str, str | None], str]

_SETTING = re.compile(r"<(\w+)(?:=([^>]*))?>")


_NUMBER = re.compile(r"\$?[\d,]+(?:\.\d+)?")


def python_setting(name: str, value: str | None) -> str:
    """``max_depth``, ``provider="fixture"``, ``max_cost=0.5``, ``timeout=None``: how the
    Python API spells a setting (the CLI's ``none`` is ``None``, ``$0.5`` is ``0.5``)."""
    if value is None:
        return name
    if value == "none":
        return f"{name}=None"
    if _NUMBER.fullmatch(value):
        return f"{name}={value.replace('$', '').replace(',', '_')}"
    return f'{name}="{value}"'


class SettingError(UsageError):
    """A setting has a value rlm cannot run with.

    The message names settings with markers (``<max_depth>``, or
    ``<provider=fixture>`` to suggest a value): ``str()`` spells them as the
    Python API does (``max_depth``); :meth:`spelled` spells them another way
    (the CLI passes its flags: ``--max-depth``).
    """

    def __init__(self, template: str) -> None:
        self.template = template
        super().__init__(self.spelled(python_setting))

    def spelled(self, namer: SettingNamer) -> str:
        """The message with every setting spelled by ``namer(name, value)``."""
        return _SETTING.sub(lambda m: namer(m.group(1), m.group(2)), self.template)


class ProviderError(RLMError):
    """An LLM endpoint failed.  ``url`` names the endpoint; ``brief`` says what went wrong
    in a few words, for a progress line (``timed out after 600s (--request-timeout)``,
    ``rate limited (HTTP 429)``): the message says it in full."""

    brief_default = "failed"

    def __init__(
        self, message: str, *, url: str = "", retryable: bool = False, brief: str | None = None
    ) -> None:
        super().__init__(message)
        self.url = url
        self.retryable = retryable
        self.brief = brief or self.brief_default


class ProviderConnectionError(ProviderError):
    """The endpoint could not be reached, reset the connection, or timed out.

    Retryable, except when the host name does not exist or the server's certificate
    is not trusted (no retry can fix either).
    """

    brief_default = "connection failed"

    def __init__(
        self, message: str, *, url: str = "", retryable: bool = True, brief: str | None = None
    ) -> None:
        super().__init__(message, url=url, retryable=retryable, brief=brief)


class ProviderTimeout(ProviderConnectionError):
    """An attempt passed a time limit: ``request_timeout`` for the whole of it, or
    ``stream_idle_timeout`` between two pieces of a stream (``limit`` names which,
    ``seconds`` its value).  Retryable.  Adaptive concurrency counts it as push-back,
    as it does a 429: a server too slow to answer in time has more requests than it
    works on (a local server with one slot queues the others)."""

    brief_default = "timed out"

    def __init__(
        self,
        message: str,
        *,
        url: str = "",
        limit: str = "request_timeout",
        seconds: float | None = None,
        brief: str | None = None,
    ) -> None:
        super().__init__(message, url=url, brief=brief)
        self.limit = limit
        self.seconds = seconds


class ProviderResponseError(ProviderError):
    """The endpoint answered, but not with the JSON shape of a chat completion."""

    brief_default = "bad reply"


class ProviderStatusError(ProviderError):
    """The endpoint answered with an HTTP error status."""

    def __init__(
        self,
        message: str,
        *,
        url: str = "",
        status: int,
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> None:
        brief = "rate limited (HTTP 429)" if status == 429 else f"HTTP {status}"
        super().__init__(message, url=url, retryable=retryable, brief=brief)
        self.status = status
        self.retry_after = retry_after


class AuthenticationError(ProviderStatusError):
    """401: the provider refused the credentials; 403: it forbade the request, for the
    credentials or for what was asked (a policy, a region, a model), as its message
    says.  Never retried: the same request gets the same answer."""

    exit_code = 4
    ends_run = True


class QuotaExceededError(ProviderStatusError):
    """402, or 429 with ``insufficient_quota``: the account is out of credit."""

    exit_code = 3
    ends_run = True


class ContextLengthError(ProviderStatusError):
    """400 (or another 4xx) saying the prompt and the output cap together pass the model's
    context window (llama.cpp's and vLLM's "maximum context length is N tokens", OpenAI's
    ``context_length_exceeded``, Anthropic's "prompt is too long").  Never retried: the
    same request does not fit the next time either; the message says what to change."""


class RateLimitError(ProviderStatusError):
    """429: too many requests.  Retryable; ``retry_after`` is in seconds when known."""


class JournalError(RLMError):
    """The journal (SQLite file or PostgreSQL database) cannot be opened or used.

    Raised for a file that is not an rlm journal, a journal written by a newer
    rlm, an unknown volley id (:class:`UnknownVolleyError`), or a database
    error; the journal is never replaced or altered to make an error go away.
    """


class UnknownVolleyError(JournalError, UsageError):
    """The journal holds no volley with this id (for ``last``: no volley at all).

    A mistyped id is the user's mistake, so it is a :class:`UsageError` too (exit
    2); it stays a :class:`JournalError` for code that catches those.  ``ref`` is
    the id (or ``last``) asked for, ``journal`` where it was looked up.
    """

    exit_code = 2

    def __init__(self, message: str, *, ref: str, journal: str) -> None:
        super().__init__(message)
        self.ref = ref
        self.journal = journal


class ClaimLost(JournalError):
    """A volley worker no longer holds its claim on a task, so the task is not sent.

    Its heartbeat stopped for longer than the stale timeout (the process was
    paused, or the machine slept) and another worker reopened the claim.  The
    volley runner ends the task with no verdict: the task's holder now gives it.
    It ends the whole run of an ``--rlm`` task (none of its requests may go).
    """

    ends_run = True


class SandboxError(RLMError):
    """A sandbox process misbehaved.  The call that owns it reports the error."""


class SandboxCrashed(SandboxError):
    """The sandbox exited, was killed, or broke the frame protocol."""


class ExecutionTimeout(SandboxError):
    """One code execution ran past ``--exec-timeout``; the sandbox was killed."""


class LimitExceeded(RLMError):
    """A configured limit ended the run."""

    exit_code = 3
    ends_run = True


class BudgetExceeded(LimitExceeded):
    """The shared budget ledger refused a request."""


class RunTimeout(LimitExceeded):
    """The run passed its wall-clock ``--timeout``."""


class Interrupted(RLMError):
    """Ctrl-C (SIGINT), SIGTERM or SIGHUP (the terminal closed) stopped the run."""

    exit_code = 130
    ends_run = True
