"""Arms: the ways an eval answers each item (``--arm NAME=SPEC``, repeatable).

``SPEC`` is a comma-separated list: first, optionally, the kind — ``rlm`` (an RLM
call over the item's context; the default) or ``direct`` (one completion with the
whole context in the prompt) — or ``profile:NAME`` (a config profile's settings);
then settings as ``key=value``, read as their flags are::

    --arm rlm                       an RLM with the eval's settings
    --arm direct                    one completion per item
    --arm d2=max_depth=2,sub_model=gpt-4.1-nano
    --arm big=direct,model=gpt-4.1,max_cost=2
    --arm local=profile:fast-local

An arm may set what shapes its own calls (``model``, ``max_tokens``, ``timeout``
and the run settings a volley task may set for itself: ``sub_model``,
``max_depth``, ``max_iterations``, ``context_window``...), and ``max_cost``, its
own cap in USD.  Every arm shares the eval's endpoint, gate and ledger, so a
setting that would change those (``provider``, ``base_url``, ``rpm``...) is
refused with the way to compare such runs: two evals and ``rlm eval compare``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from rlm._config import SETTINGS
from rlm._profiles import Profile
from rlm.errors import UsageError
from rlm.volley.records import TASK_SETTINGS

__all__ = ["ARM_SETTINGS", "Arm", "default_arms", "parse_arm"]

ArmKind = Literal["rlm", "direct"]
#: What an arm may set for its own tasks (with ``max_cost``, its cap).
ARM_SETTINGS = frozenset({"model", "max_tokens", "timeout", *TASK_SETTINGS})
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")
_ROWS = {row.name: row for row in SETTINGS}


@dataclass(frozen=True)
class Arm:
    """One arm: its name, its kind, the settings of its own and its cap (USD)."""

    name: str
    kind: ArmKind
    settings: dict[str, Any] = field(default_factory=dict)
    max_cost: float | None = None

    def record(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "settings": dict(self.settings),
                "max_cost": self.max_cost}

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> Arm:
        kind: ArmKind = "direct" if data.get("kind") == "direct" else "rlm"
        cost = data.get("max_cost")
        return cls(str(data["name"]), kind, dict(data.get("settings") or {}),
                   None if cost is None else float(cost))

    def describe(self) -> str:
        """``rlm (model=x, max_depth=2)``: how a report names what the arm is."""
        own = [f"{k}={v}" for k, v in sorted(self.settings.items())]
        if self.max_cost is not None:
            own.append(f"max_cost={self.max_cost:g}")
        return self.kind + (f" ({', '.join(own)})" if own else "")


def default_arms() -> list[Arm]:
    """Without ``--arm``: an RLM and one direct completion, with the eval's settings."""
    return [Arm("rlm", "rlm"), Arm("direct", "direct")]


def parse_arm(text: str, *, eval_values: Mapping[str, Any],
              profiles: Callable[[str], Profile]) -> Arm:
    """The arm ``--arm text`` names (UsageError saying what is wrong and what to write).

    ``eval_values`` are the eval's own settings (a profile's equal ones are no
    change); ``profiles`` loads a config profile by name.
    """
    name, sep, spec = text.partition("=")
    name = name.strip()
    if not sep:
        spec = name
    if not _NAME.match(name):
        raise UsageError(f"--arm {text!r}: name the arm first, as NAME=SPEC (letters, digits, "
                         "_ . -), e.g. --arm d2=max_depth=2")
    kind: ArmKind = "rlm"
    settings: dict[str, Any] = {}
    cost: float | None = None
    for position, part in enumerate(p.strip() for p in spec.split(",")):
        if position == 0 and part in ("rlm", "direct"):
            kind = "direct" if part == "direct" else "rlm"
        elif position == 0 and part.startswith("profile:"):
            kind, settings, cost = _from_profile(text, profiles(part.removeprefix("profile:")),
                                                 eval_values)
        elif part:
            key, value = _setting(text, part)
            if key == "max_cost":
                cost = value
            else:
                settings[key] = value
    return Arm(name, kind, settings, cost)


def _setting(text: str, part: str) -> tuple[str, Any]:
    raw, sep, value = part.partition("=")
    key = raw.strip().replace("-", "_")
    if not sep:
        raise UsageError(f"--arm {text!r}: {part!r} is not key=value (a kind, rlm or direct, "
                         "or profile:NAME comes first)")
    if key not in ARM_SETTINGS and key != "max_cost":
        _refuse(text, key)
    try:
        return key, _ROWS[key].parse(value.strip())
    except ValueError as exc:
        raise UsageError(f"--arm {text!r}: {key}: {exc}") from None


def _refuse(text: str, key: str) -> None:
    if key not in _ROWS:
        raise UsageError(f"--arm {text!r}: unknown setting {key!r}; an arm may set "
                         f"{', '.join(sorted(ARM_SETTINGS | {'max_cost'}))}")
    raise UsageError(
        f"--arm {text!r}: {key} is the whole eval's (every arm shares its endpoint, gate and "
        f"ledger): give it to rlm eval itself, or run each setting as its own eval and "
        "compare them with `rlm eval compare A B`"
    )


def _from_profile(text: str, profile: Profile,
                  eval_values: Mapping[str, Any]) -> tuple[ArmKind, dict[str, Any], float | None]:
    kind: ArmKind = "rlm"
    settings: dict[str, Any] = {}
    cost: float | None = None
    for key, value in profile.chosen.items():
        if key == "mode":
            kind = "direct" if value == "completion" else "rlm"
        elif key == "max_cost":
            cost = value
        elif key in ARM_SETTINGS:
            settings[key] = value
        elif key in eval_values and eval_values[key] != value:
            _refuse(f"{text} ({key} = {value!r} in [profiles.{profile.name}])", key)
    return kind, settings, cost
