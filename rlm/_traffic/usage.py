"""Token and request accounting for one run."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from rlm.providers.base import Completion, CompletionRequest

__all__ = [
    "DEFAULT_OUTPUT_ESTIMATE",
    "Usage",
    "estimate_io",
    "prefix_tokens",
    "usage_or_estimate",
]

#: Output tokens assumed for a request that sets no ``max_tokens``.
DEFAULT_OUTPUT_ESTIMATE = 1024


def estimate_io(request: CompletionRequest) -> tuple[int, int]:
    """(input, output) tokens a request may use: prompt chars / 4, and ``max_tokens``
    (or DEFAULT_OUTPUT_ESTIMATE).  Pacing and budget reservations both use this."""
    prompt = sum(len(m["content"]) for m in request.messages) // 4
    return prompt, request.max_tokens or DEFAULT_OUTPUT_ESTIMATE


def prefix_tokens(request: CompletionRequest) -> int:
    """Input tokens of the request's cacheable prefix (its first ``cache_prefix`` messages;
    all of them for a conversation whose end is cached, ``cache_end``), estimated like the
    prompt: characters / 4."""
    cached = request.messages if request.cache_end else request.messages[: request.cache_prefix]
    return sum(len(m["content"]) for m in cached) // 4


def usage_or_estimate(request: CompletionRequest, completion: Completion) -> Completion:
    """``completion``, or, when its provider found no usage in the reply (``metadata
    ["usage"] == "missing"``: llama.cpp's server streams none), the same with its tokens
    estimated as characters / 4 (the prompt's as :func:`estimate_io` counts it, the
    answer's rounded up) and ``metadata["usage"] = "estimated"``: budgets then count
    something close, and the run's summary and trace say the count is approximate."""
    if completion.metadata.get("usage") != "missing":
        return completion
    prompt, _ = estimate_io(request)
    return replace(
        completion,
        input_tokens=prompt,
        output_tokens=math.ceil(len(completion.text) / 4),
        metadata={**completion.metadata, "usage": "estimated"},
    )


@dataclass(frozen=True, slots=True)
class Usage:
    """What a run has spent so far.  ``llm_calls`` counts requests sent to a provider."""

    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    def to_dict(self) -> dict[str, int]:
        return {
            "llm_calls": self.llm_calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
        }
