"""What ``rlm bench`` reports for one scenario of the default set: figures against targets.

Every scenario of the default set has its own figures (η for most, what the
journal costs, peak memory, time per task at two sizes), each printed with its
target and whether it was met, and figures reported without a target (the
client's CPU per request).  ``--json`` adds each scenario's details.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Check", "Figures"]


@dataclass(frozen=True)
class Check:
    """One figure and its target: ``shown`` and ``target`` as the table prints them."""

    what: str
    value: float | None
    shown: str
    target: str | None = None
    met: bool | None = None  # None: no target

    def as_json(self) -> dict[str, Any]:
        value = round(self.value, 6) if isinstance(self.value, float) else self.value
        return {"what": self.what, "value": value, "shown": self.shown, "target": self.target,
                "met": self.met}


@dataclass(frozen=True)
class Figures:
    """One scenario of the default set, measured.  Times in seconds."""

    name: str
    about: str
    n: int
    c: int
    t: float | None
    t_star: float | None
    checks: tuple[Check, ...]
    correct: bool
    notes: tuple[str, ...] = ()  # figures reported without a target
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def eta(self) -> float | None:
        return self.t_star / self.t if self.t and self.t_star else None

    @property
    def met(self) -> bool | None:
        """Whether every target was met; None when the scenario has none."""
        judged = [c.met for c in self.checks if c.met is not None]
        return all(judged) if judged else None

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "about": self.about, "n": self.n, "c": self.c,
            "t": None if self.t is None else round(self.t, 6),
            "t_star": None if self.t_star is None else round(self.t_star, 6),
            "checks": [c.as_json() for c in self.checks], "notes": list(self.notes),
            "met": self.met, "correct": self.correct, "detail": self.detail,
        }
