"""A fast start: importing rlm and running its commands loads no test or benchmark code.

Each check runs a fresh interpreter and reads back ``sys.modules`` as it was
when that interpreter exited, so what a user's ``rlm`` process loads is what
is checked (the test process itself has pytest and everything else loaded).
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import msgpack
import pytest

from rlm._sandbox.early import _package_dirs, zygote_argv, zygote_env
from rlm.fixtures.needle import generate_needle

# Test and benchmark code, never loaded outside `rlm bench` and `rlm fixture-server`.
FORBIDDEN = ("pytest", "_pytest", "hypothesis", "trio.testing", "rlm.bench", "rlm.testing")

# Dumps the module names at exit (after SystemExit too) on stderr, after a marker.
_REPORT = (
    "import atexit, json, sys\n"
    "atexit.register(lambda: sys.stderr.write('\\nMODULES ' + json.dumps(sorted(sys.modules))))\n"
)


def loaded_modules(code: str, *args: str, stdin: bytes = b"") -> set[str]:
    """The modules a fresh ``python -c code args...`` had loaded when it exited."""
    done = subprocess.run(
        [sys.executable, "-c", _REPORT + code, *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )
    stderr = done.stderr.decode()
    assert "\nMODULES " in stderr, stderr
    return set(json.loads(stderr.rsplit("\nMODULES ", 1)[1]))


def forbidden(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == f or m.startswith(f + ".") for f in FORBIDDEN))


# Features a plain `rlm run` does not use: they load when a command or method needs them.
NOT_ON_THE_RUN_PATH = (
    "rlm.volley", "rlm.streaming", "rlm.journal", "rlm.view", "rlm.cli.volley_cmd",
)


def loaded(modules: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes))


def test_import_rlm_loads_neither_test_code_nor_the_runtime() -> None:
    modules = loaded_modules("import rlm, rlm.cli")
    assert forbidden(modules) == []
    assert loaded(modules, NOT_ON_THE_RUN_PATH) == []
    # The runtime (and trio under it) loads when a run needs it, not on import.
    assert "trio" not in modules
    assert "rlm._run.runtime" not in modules


def test_public_names_still_resolve_from_the_package() -> None:
    code = "import rlm; assert rlm.RLM.__name__ == 'RLM'; rlm.RunConfig; rlm.Usage"
    modules = loaded_modules(code)
    assert "rlm._api" in modules
    assert forbidden(modules) == []


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["run", "--help"]])
def test_help_and_version_load_no_test_code(args: list[str]) -> None:
    modules = loaded_modules("from rlm.cli import main; main()", *args)
    assert forbidden(modules) == []
    if args == ["--version"]:  # no command module at all
        assert "trio" not in modules and "rlm.cli.run_cmd" not in modules


@pytest.mark.parametrize("quiet", [["-q"], []])
def test_a_fixture_run_loads_no_test_code(tmp_path: Path, quiet: list[str]) -> None:
    fixture = generate_needle(20_000, seed=3)
    path = tmp_path / "needle.txt"
    path.write_text(fixture.text, encoding="utf-8")
    code = "from rlm.cli import main; main()"
    args = ["run", fixture.question, "--context-file", str(path), "--provider", "fixture", *quiet]
    modules = loaded_modules(code, *args)
    assert "rlm._run.runtime" in modules  # it did run
    assert forbidden(modules) == []
    # Neither volleys, streaming, the journal nor the viewer.  Progress on a pipe (stderr is
    # captured here) is plain text: no rich, with -q or without.
    assert loaded(modules, (*NOT_ON_THE_RUN_PATH, "rich")) == []
    # The host reads the sandbox's protocol, never its hardening code (ctypes, Landlock,
    # seccomp): that runs in the zygote and its forks.
    assert "rlm_sandbox.protocol" in modules
    assert loaded(modules, ("rlm_sandbox.isolation", "rlm_sandbox.seccomp")) == []
    # Sessions, --stream's display, --require-isolation's check and the stdin probe of a
    # run given no path load when those are used.
    assert loaded(modules, ("rlm._session", "rlm.cli._live", "rlm.cli.doctor_cmd", "termios")) == []
    # The fixture model needs no HTTP client, and nothing on the path needs difflib (a
    # spelling hint after a mistake).
    assert loaded(modules, ("httpx", "httpcore", "h11", "anyio", "rlm.providers._http")) == []
    if not quiet:  # -q is a short option: click looks it up as a long one first (difflib)
        assert "difflib" not in modules


def test_progress_on_a_terminal_still_goes_through_rich(tmp_path: Path) -> None:
    fixture = generate_needle(20_000, seed=3)
    path = tmp_path / "needle.txt"
    path.write_text(fixture.text, encoding="utf-8")
    code = "import os; os.environ['FORCE_COLOR'] = '1'; from rlm.cli import main; main()"
    args = ["run", fixture.question, "--context-file", str(path), "--provider", "fixture"]
    assert "rich.console" in loaded_modules(code, *args)


def test_the_zygote_starts_without_site_and_without_an_argument_parser() -> None:
    """Started as the host starts it, the zygote runs no ``site`` (no site-packages scan,
    no ``.pth`` file, no editable install's finder) and no argparse; it still answers."""
    host, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    argv = zygote_argv(child.fileno())
    argv[1:1] = ["-X", "importtime"]  # every module it imports, listed on stderr
    process = subprocess.Popen(
        argv, pass_fds=[child.fileno()], env=zygote_env(), cwd="/", start_new_session=True,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    child.close()
    try:
        host.settimeout(60)
        host.send(msgpack.packb({"t": "ping"}))
        assert msgpack.unpackb(host.recv(4096))["t"] == "pong"
    finally:
        host.close()  # end of input: the zygote kills its spare and exits
        stderr = process.communicate(timeout=60)[1].decode()
    imported = set(re.findall(r"\|\s*(\S+)\s*$", stderr, re.MULTILINE))
    assert {"rlm_sandbox.zygote", "RestrictedPython", "msgpack"} <= imported
    assert {"site", "argparse"}.isdisjoint(imported)
    assert [m for m in imported if m.startswith(("__editable__", "_distutils_hack"))] == []


def test_a_zygote_whose_packages_cannot_be_located_starts_with_site() -> None:
    assert _package_dirs(("rlm_no_such_package",)) is None
    assert _package_dirs(("struct",)) is None  # a module, not a package directory
