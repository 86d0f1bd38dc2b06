"""Live streams of a run's events: many producers merged for one consumer."""

from rlm.streaming.merger import StreamMerger

__all__ = ["StreamMerger"]
