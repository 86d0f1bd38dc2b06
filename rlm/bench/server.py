"""The fixture server in a process of its own, for the HTTP scenarios of ``rlm bench``.

Served from the measured run's own trio loop, it would take turns on the loop
the run is measured on; a provider's work never does.  So each HTTP scenario
starts ``rlm fixture-server`` as a child process and kills it on exit.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ServerShape", "drawn_latency", "fixture_server"]

_DRAWN = re.compile(r"-(\d+\.\d+)s$")


@dataclass(frozen=True)
class ServerShape:
    """How the fixture server answers: latencies, and the limits it enforces."""

    root_latency: float = 0.0
    sub_latency: float = 0.0
    sigma: float = 0.0  # > 0: lognormal sub-query latencies (seeded), median sub_latency
    seed: int = 1
    rpm: float | None = None
    burst: int = 1
    announce_rpm: bool = False
    hidden_cap: int | None = None
    retry_after: float = 1.0

    def argv(self) -> list[str]:
        argv = [sys.executable, "-m", "rlm", "fixture-server", "--port", "0",
                "--latency", repr(self.root_latency), "--sub-latency", repr(self.sub_latency),
                "--retry-after", repr(self.retry_after)]
        if self.sigma > 0:
            argv += ["--latency-sigma", repr(self.sigma), "--seed", str(self.seed)]
        if self.rpm is not None:
            argv += ["--rpm", repr(self.rpm), "--rpm-burst", str(self.burst)]
            if self.announce_rpm:
                argv.append("--announce-rpm")
        if self.hidden_cap is not None:
            argv += ["--max-concurrent", str(self.hidden_cap)]
        return argv


@contextlib.contextmanager
def fixture_server(shape: ServerShape) -> Iterator[str]:
    """``rlm fixture-server`` in a process of its own; yields its ``/v1`` URL; killed on exit."""
    process = subprocess.Popen(shape.argv(), stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        line = process.stderr.readline()  # it says where it listens once it does
        found = re.search(r"listening on (http://\S+)", line)
        if found is None:
            raise RuntimeError(f"the fixture server did not start: {line}{process.stderr.read()}")
        yield found.group(1)
    finally:
        process.kill()
        process.wait()
        if process.stderr is not None:
            process.stderr.close()


def drawn_latency(response: Mapping[str, Any]) -> float | None:
    """The latency the server drew for a reply, from its id (``...-0.412345s``), if it did."""
    reply_id = response.get("metadata", {}).get("id")
    found = _DRAWN.search(reply_id) if isinstance(reply_id, str) else None
    return float(found.group(1)) if found else None
