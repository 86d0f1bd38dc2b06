"""Isolation layers: their names, what the host adds, and ``--require-isolation``.

The sandbox reports its own layers (``sandbox/isolation.py``) in its
``ready`` frame as ``{layer: "active" | "unavailable: why"}``; the host adds
the layers it provides itself.  ``SandboxStarted.isolation`` lists the active
ones, ``rlm doctor`` prints them all with the reason for any that is missing,
and ``--require-isolation LAYER,...`` turns a missing layer into a refusal.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rlm.errors import SandboxError
from rlm_sandbox.protocol import ISOLATION_LAYERS as CHILD_LAYERS

__all__ = [
    "ALL_LAYERS",
    "CHILD_LAYERS",
    "HOST_LAYERS",
    "IsolationUnavailable",
    "active_layers",
    "check_required",
    "parse_layers",
]

#: Layers the host provides for every sandbox, whatever the kernel allows.
HOST_LAYERS = ("restrictedpython", "scrubbed-env", "own-process-group", "dedicated-pipes")
ALL_LAYERS = (*HOST_LAYERS, *CHILD_LAYERS)
ACTIVE = "active"


class IsolationUnavailable(SandboxError):
    """A layer named by ``--require-isolation`` is not available on this machine."""

    ends_run = True


def active_layers(report: Mapping[str, str]) -> list[str]:
    """The child layers reported active, in their canonical order."""
    return [layer for layer in CHILD_LAYERS if report.get(layer) == ACTIVE]


def parse_layers(text: str | Iterable[str]) -> tuple[str, ...]:
    """``"seccomp,landlock"`` (or several such strings) → validated layer names.

    ``all`` names every layer.  Raises ValueError naming an unknown layer.
    """
    parts = [text] if isinstance(text, str) else list(text)
    names: list[str] = []
    for part in parts:
        for name in (item.strip() for item in part.split(",")):
            if not name:
                continue
            if name == "all":
                names.extend(ALL_LAYERS)
            elif name in ALL_LAYERS:
                names.append(name)
            else:
                raise ValueError(
                    f"unknown isolation layer {name!r}; known: all, {', '.join(ALL_LAYERS)}")
    return tuple(dict.fromkeys(names))


def check_required(report: Mapping[str, str], required: Iterable[str]) -> None:
    """Raise IsolationUnavailable if a required layer is not active in ``report``."""
    missing = [
        f"{layer} ({report.get(layer, 'unavailable: not reported')})"
        for layer in required
        if layer not in HOST_LAYERS and report.get(layer) != ACTIVE
    ]
    if missing:
        raise IsolationUnavailable(
            "--require-isolation: " + "; ".join(missing) + " (run `rlm doctor` for details)")
