"""Token and request accounting for one run."""

from __future__ import annotations

from dataclasses import dataclass

from rlm.providers.base import CompletionRequest

__all__ = ["DEFAULT_OUTPUT_ESTIMATE", "Usage", "estimate_io", "prefix_tokens"]

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
