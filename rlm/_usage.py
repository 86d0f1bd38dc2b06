"""Token and request accounting for one run."""

from __future__ import annotations

from dataclasses import dataclass

from rlm.providers.base import CompletionRequest

__all__ = ["DEFAULT_OUTPUT_ESTIMATE", "Usage", "UsageMeter", "estimate_io"]

#: Output tokens assumed for a request that sets no ``max_tokens``.
DEFAULT_OUTPUT_ESTIMATE = 1024


def estimate_io(request: CompletionRequest) -> tuple[int, int]:
    """(input, output) tokens a request may use: prompt chars / 4, and ``max_tokens``
    (or DEFAULT_OUTPUT_ESTIMATE).  Pacing and budget reservations both use this."""
    prompt = sum(len(m["content"]) for m in request.messages) // 4
    return prompt, request.max_tokens or DEFAULT_OUTPUT_ESTIMATE


@dataclass(frozen=True)
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


class UsageMeter:
    """The running totals behind :class:`Usage`."""

    def __init__(self) -> None:
        self.llm_calls = 0
        self.input_tokens = 0
        self.output_tokens = 0

    def count_request(self) -> None:
        self.llm_calls += 1

    def add_tokens(self, input_tokens: int, output_tokens: int) -> None:
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens

    def snapshot(self) -> Usage:
        return Usage(self.llm_calls, self.input_tokens, self.output_tokens)
