"""Journal test fixtures: a fresh SQLite file, and a real PostgreSQL server on loopback.

The PostgreSQL server comes from Debian's ``postgresql`` package (``initdb`` and
``pg_ctl`` under /usr/lib/postgresql/*/bin); ``.ci/run`` installs it.  It runs in
a temporary directory, trust auth on 127.0.0.1 only, as ``nobody`` when the
tests run as root (initdb refuses root).  Tests that need it skip, saying why,
only when the binaries are absent.  Each test gets its own database.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from itertools import count
from pathlib import Path

import pytest

__all__ = ["pg_bin", "pg_server", "pg_url"]

_databases = count(1)


def pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_user(argv: list[str], user: str | None) -> list[str]:
    return ["runuser", "-u", user, "--", *argv] if user else argv


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The base URL (no database) of a PostgreSQL server running for this test session."""
    bindir = pg_bin()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries not found (apt-get install postgresql)")
    user = "nobody" if os.geteuid() == 0 else None
    top = Path(tempfile.mkdtemp(prefix="rlm-pg-"))
    data = top / "data"
    if user:
        shutil.chown(top, user)
        top.chmod(0o700)
    port = _free_port()
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE, "check": True}
    try:
        subprocess.run(
            _as_user(
                [
                    str(bindir / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "--no-sync",
                    "-E",
                    "UTF8",
                ],
                user,
            ),
            **quiet,  # type: ignore[call-overload]
        )
        options = (
            f"-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories={top} -c fsync=off"
        )
        subprocess.run(
            _as_user(
                [
                    str(bindir / "pg_ctl"),
                    "-D",
                    str(data),
                    "-o",
                    options,
                    "-l",
                    str(top / "log"),
                    "-w",
                    "-t",
                    "60",
                    "start",
                ],
                user,
            ),
            **quiet,  # type: ignore[call-overload]
        )
    except subprocess.CalledProcessError as exc:
        shutil.rmtree(top, ignore_errors=True)
        raise RuntimeError(f"could not start PostgreSQL: {exc.stderr!r}") from exc
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}"
    finally:
        subprocess.run(
            _as_user(
                [str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"], user
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        shutil.rmtree(top, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server: str) -> str:
    """A URL to a fresh, empty database on the session's server."""
    import psycopg

    name = f"journal_{os.getpid()}_{next(_databases)}"
    with psycopg.connect(f"{pg_server}/postgres", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return f"{pg_server}/{name}"
