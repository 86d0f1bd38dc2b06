"""Live streams of a run's events: many producers merged for one consumer."""

from rlm.streaming.merger import StreamMerger, drain

__all__ = ["StreamMerger", "drain"]
