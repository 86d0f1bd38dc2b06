"""``rlm doctor``: which isolation layers are active on this machine, and why any is not."""

from __future__ import annotations

import json
import os
import platform
import sys
from typing import Any

import click
import trio

from rlm._config import DEFAULTS
from rlm._events import EventBus
from rlm._sandbox.isolation import ALL_LAYERS, HOST_LAYERS, parse_layers
from rlm._sandbox.launcher import SandboxLauncher
from rlm._sandbox.memory import machine_memory, memory_ceiling
from rlm._sizes import format_size
from rlm.cli._errors import debug_wanted, fail, leaf_error
from rlm.errors import RLMError

__all__ = ["doctor", "isolation_report", "require_isolation"]

_DESCRIPTIONS = {
    "restrictedpython": "language layer: guarded attributes, imports, writes and builtins",
    "scrubbed-env": "no host environment variables (no API keys) in the sandbox",
    "own-process-group": "own session; the host kills the whole group",
    "dedicated-pipes": "frames on their own pipes, byte caps per frame and per execution",
    "fds": "no inherited file descriptors but the protocol ones",
    "netns": "fresh network and IPC namespaces: no interfaces, no shared IPC objects",
    "rlimits": "address space, CPU time, open files, file size 0, no core dumps",
    "uid": "a different unprivileged uid per sandbox",
    "no-new-privs": "no privilege gain through exec",
    "parent-death-signal": "killed when its parent (the zygote) dies",
    "landlock": "read-only access to the interpreter and its libraries, nothing else",
    "seccomp": "no sockets, fork/exec, ptrace, or signals to other processes",
}


async def _probe() -> tuple[dict[str, str], dict[str, Any]]:
    launcher = SandboxLauncher(events=EventBus(), max_output_chars=1000, pool_size=0)
    async with launcher.serving():
        box = await launcher.probe()
        try:
            zygote = launcher.zygote
            facts = {"zygote": zygote is not None, "sandbox_pid": box.pid}
            return dict(box.layers), facts
        finally:
            await box.aclose()


def isolation_report() -> tuple[dict[str, str], dict[str, Any]]:
    """Start one real sandbox and return ``({layer: status}, facts)`` for every layer.

    Exits 1 with one ``Error:`` line (no traceback) when no sandbox can start.
    """
    try:
        layers, facts = trio.run(_probe)
    except Exception as exc:  # a trio nursery wraps the launcher's error in a group
        inner = leaf_error(exc)
        if not isinstance(inner, RLMError | OSError) or debug_wanted(sys.argv):
            raise
        said = str(inner)
        if not said.startswith("cannot start a sandbox"):  # the launcher's own says it all
            said = (f"cannot start a sandbox: {said}. This is a problem of this machine or "
                    "user, not of the run: see docs/sandbox.md")
        fail(f"{said} (`rlm --debug doctor` shows the details)", 1)
    report = {layer: "active" for layer in HOST_LAYERS}
    report.update(
        {
            layer: layers.get(layer, "unavailable: not reported")
            for layer in ALL_LAYERS
            if layer not in HOST_LAYERS
        }
    )
    return report, facts


def require_isolation(layers: tuple[str, ...]) -> None:
    """Exit 1 with the reason unless every layer in ``layers`` is active here."""
    report, _ = isolation_report()
    missing = [
        f"{layer} ({report.get(layer)})" for layer in layers if report.get(layer) != "active"
    ]
    if missing:
        click.echo(
            "Error: --require-isolation: not active on this machine: "
            + "; ".join(missing)
            + " (see `rlm doctor`)",
            err=True,
        )
        sys.exit(1)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--require-isolation",
    "required",
    default="",
    metavar="LAYER,...",
    help="Exit 1 unless these layers are active ('all' for every layer).",
)
def doctor(as_json: bool, required: str) -> None:
    """Check the sandbox on this machine: which isolation layers are active, and why not.

    Starts one real sandbox (through the zygote, as a run does) and prints
    every layer with its status.  A layer the kernel refuses does not stop
    runs unless `rlm run --require-isolation LAYER` names it.

    \b
    Examples:
      rlm doctor
      rlm doctor --json
      rlm doctor --require-isolation seccomp,landlock
    """
    try:
        wanted = parse_layers(required)
    except ValueError as exc:
        click.echo(f"Error: --require-isolation: {exc}", err=True)
        sys.exit(2)
    report, facts = isolation_report()
    missing = [layer for layer in wanted if report.get(layer) != "active"]
    system = {
        "kernel": platform.release(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "root": os.geteuid() == 0,
    }
    memory = {"per_sandbox": DEFAULTS.sandbox_memory, "ceiling": memory_ceiling(),
              "machine": machine_memory()}
    if as_json:
        click.echo(json.dumps({"layers": report, "system": system, **facts, "memory": memory,
                               "missing_required": missing}))
    else:
        click.echo(
            f"kernel {system['kernel']} ({system['machine']}), python {system['python']}, "
            f"{'root' if system['root'] else 'not root'}; sandboxes "
            f"{'forked by the zygote' if facts['zygote'] else 'spawned directly'}"
        )
        width = max(len(layer) for layer in report)
        for layer, status in report.items():
            mark = "ok " if status == "active" else "-- "
            detail = _DESCRIPTIONS.get(layer, "") if status == "active" else status
            click.echo(f"{mark}{layer:<{width}}  {detail}")
        active = sum(1 for status in report.values() if status == "active")
        click.echo(f"{active}/{len(report)} layers active")
        click.echo(
            f"memory: {format_size(memory['per_sandbox'])} per sandbox by default "
            f"(--sandbox-memory); a run's sandboxes use at most {format_size(memory['ceiling'])} "
            f"together (half of this machine's {format_size(memory['machine'])})"
        )
    if missing:
        click.echo(
            f"Error: required isolation layers are not active: {', '.join(missing)}", err=True
        )
        sys.exit(1)
