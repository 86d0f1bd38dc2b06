"""Per-lane traffic metrics: what the gate saw, for ``--json`` and the stderr summary."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

__all__ = ["LaneMetrics", "TrafficMetrics"]

#: Latencies a lane keeps for its median: all of a run's, a uniform sample of a volley's
#: million (memory bounded by what is in flight, not by the number of requests).
LATENCY_SAMPLE = 4096


@dataclass(slots=True, eq=False)
class LaneMetrics:
    """Counters for one lane.  Latencies are per attempt; waits are per attempt."""

    attempts: int = 0
    ok: int = 0
    failed: int = 0
    retries: int = 0
    rate_limited: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    queue_wait_total_s: float = 0.0
    queue_wait_max_s: float = 0.0
    pace_wait_total_s: float = 0.0
    latency_count: int = 0
    latency_total_s: float = 0.0
    latency_max_s: float = 0.0
    # A uniform sample (reservoir) of the latencies, for the median; all of them up to
    # LATENCY_SAMPLE.  Seeded: the same run gives the same figures.
    latency_sample: list[float] = field(default_factory=list)
    _sampler: random.Random = field(default_factory=lambda: random.Random(0))

    def add_latency(self, latency: float) -> None:
        """Count one successful attempt's latency (seconds)."""
        self.latency_count += 1
        self.latency_total_s += latency
        self.latency_max_s = max(self.latency_max_s, latency)
        if len(self.latency_sample) < LATENCY_SAMPLE:
            self.latency_sample.append(latency)
            return
        slot = self._sampler.randrange(self.latency_count)
        if slot < LATENCY_SAMPLE:
            self.latency_sample[slot] = latency

    def to_dict(self, capacity: int) -> dict[str, Any]:
        ordered = sorted(self.latency_sample)
        n = self.latency_count
        return {
            "attempts": self.attempts,
            "ok": self.ok,
            "failed": self.failed,
            "retries": self.retries,
            "rate_limited": self.rate_limited,
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
            "capacity": capacity,
            "queue_wait_mean_s": round(self.queue_wait_total_s / self.attempts, 6)
            if self.attempts
            else 0.0,
            "queue_wait_max_s": round(self.queue_wait_max_s, 6),
            "pace_wait_total_s": round(self.pace_wait_total_s, 6),
            "latency_mean_s": round(self.latency_total_s / n, 6) if n else 0.0,
            "latency_p50_s": round(ordered[len(ordered) // 2], 6) if n else 0.0,
            "latency_max_s": round(self.latency_max_s, 6) if n else 0.0,
        }


class TrafficMetrics:
    """Both lanes' metrics plus capacity changes."""

    def __init__(self) -> None:
        self.lanes: dict[str, LaneMetrics] = {"root": LaneMetrics(), "sub": LaneMetrics()}
        self.capacity_changes = 0

    def lane(self, name: str) -> LaneMetrics:
        return self.lanes[name]

    def to_dict(
        self, capacities: dict[str, int], rpm: float | None, tpm: float | None
    ) -> dict[str, Any]:
        return {
            "lanes": {name: m.to_dict(capacities[name]) for name, m in self.lanes.items()},
            "capacity_changes": self.capacity_changes,
            "rpm": rpm,
            "tpm": tpm,
        }
