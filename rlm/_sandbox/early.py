"""Starting the zygote at process start, before trio and the runtime are imported.

A zygote takes about as long to boot (an interpreter, RestrictedPython, the
allowed modules) as the host takes to import the runtime.  ``rlm run``
therefore starts one first thing, with nothing but the standard library, so
that both happen at once; the run's launcher then adopts it
(:meth:`rlm._sandbox.zygote.Zygote.adopt`) instead of starting its own, and
the root call's sandbox is forked from it while the first step is generated.

Whoever begins an :class:`EarlyZygote` closes it on every exit path
(``with EarlyZygote.begin() as early:``): if no run adopted it, closing
stops and reaps it; once adopted, the run's launcher owns it and closing
does nothing, unless it was begun with ``reap_at_close``: then the run ends
without waiting for the zygote to exit (it reaps its sandboxes and exits while
the answer is printed and the history written) and closing waits for it.  The
``rlm`` command does that: its process still ends with nothing left.  This
module imports only the standard library on purpose.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from types import TracebackType

__all__ = ["EarlyZygote", "child_env", "zygote_argv", "zygote_env"]

_REAP_TIMEOUT = 5.0


def child_env() -> dict[str, str]:
    """A sandbox's or zygote's whole environment: nothing from the host is inherited."""
    return {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "PYTHONSAFEPATH": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
    }


def zygote_env() -> dict[str, str]:
    """The zygote's environment: :func:`child_env`, but bytecode may be written.

    The zygote imports rlm_sandbox modules the host never imports (the worker,
    the policy); with bytecode off they were compiled from source at every
    start of an editable install, a third of the zygote's boot.  It turns
    bytecode writing off itself before it forks any sandbox.
    """
    env = child_env()
    del env["PYTHONDONTWRITEBYTECODE"]
    return env


#: What the zygote imports from outside the standard library, in the order the host's
#: imports resolve (site-packages first, an editable install's finder after it).
_ZYGOTE_PACKAGES = ("msgpack", "RestrictedPython", "rlm_sandbox")

#: ``python -S -c _BOOT DIR... -- --zygote FD``: the directories go on sys.path after the
#: standard library's, where ``site`` would have put site-packages.
_BOOT = (
    "import sys; end = sys.argv.index('--'); sys.path += sys.argv[1:end]; "
    "del sys.argv[1:end + 1]; from rlm_sandbox.__main__ import main; main()"
)


def zygote_argv(control_fd: int) -> list[str]:
    """The zygote's command line, serving on the socket ``control_fd``.

    It starts without ``site`` (``-S``), given the directories of the packages it
    imports, which the host has found already: ``site`` scans site-packages and
    runs its ``.pth`` files (an editable install's finder imports pathlib,
    urllib.parse and importlib.util), about a tenth of a zygote's start, taken
    from the CPU the host's own imports run on.  Where a package cannot be
    located that way it starts as ``python -m rlm_sandbox``, with ``site``.
    """
    dirs = _package_dirs(_ZYGOTE_PACKAGES)
    if dirs is None:
        return [sys.executable, "-m", "rlm_sandbox", "--zygote", str(control_fd)]
    return [sys.executable, "-S", "-c", _BOOT, *dirs, "--", "--zygote", str(control_fd)]


def _package_dirs(names: tuple[str, ...]) -> list[str] | None:
    """The sys.path entries the packages ``names`` are imported from; None if one is not
    a regular package found on the file system."""
    import importlib.util  # loaded by site already in an editable install

    dirs: list[str] = []
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None or spec.submodule_search_locations is None:
            return None
        package = os.path.dirname(spec.origin)  # .../name/__init__.py
        if os.path.basename(package) != name or not os.path.isabs(package):
            return None
        entry = os.path.dirname(package)
        if entry not in dirs:
            dirs.append(entry)
    return dirs


class EarlyZygote:
    """A zygote process started without trio, waiting to be adopted by one run."""

    def __init__(
        self,
        process: subprocess.Popen[bytes] | None,
        control: socket.socket | None,
        *,
        reap_at_close: bool = False,
    ) -> None:
        self._process = process
        self._control = control
        self._reap_at_close = reap_at_close
        self._adopted: subprocess.Popen[bytes] | None = None  # taken; close() reaps it

    @classmethod
    def begin(cls, *, reap_at_close: bool = False) -> EarlyZygote:
        """Start the zygote now (it preloads in the background).

        If it cannot start, the result holds nothing to take: the run then
        starts its own zygote, or spawns its sandboxes directly, as it would
        have anyway, so failing here is never an error.  ``reap_at_close``:
        the run that adopts it leaves the wait for its exit to :meth:`close`.
        """
        host, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            process = subprocess.Popen(
                zygote_argv(child.fileno()),
                pass_fds=[child.fileno()],
                env=zygote_env(),
                cwd="/",
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        except OSError:
            host.close()
            return cls(None, None)
        finally:
            child.close()
        return cls(process, host, reap_at_close=reap_at_close)

    @property
    def pid(self) -> int | None:
        """The zygote's pid while it waits to be taken; None once taken or if it never started."""
        return self._process.pid if self._process is not None else None

    def wait_ready(self, timeout: float = 30.0) -> bool:
        """Block until the zygote has preloaded (it answers a ping); False if it cannot.

        For benchmarks, which start a run's clock once the process is up, as
        it is in ``rlm run`` by the time its imports are done.
        """
        import msgpack

        if self._control is None:
            return False
        self._control.settimeout(timeout)
        try:
            self._control.send(msgpack.packb({"t": "ping"}))
            answer = msgpack.unpackb(self._control.recv(4096))
        except (OSError, ValueError):
            return False
        finally:
            self._control.settimeout(None)
        return isinstance(answer, dict) and answer.get("t") == "pong"

    @property
    def reap_at_close(self) -> bool:
        """Whether :meth:`close` waits for the zygote's exit even after a run took it."""
        return self._reap_at_close

    def take(self) -> tuple[subprocess.Popen[bytes], socket.socket] | None:
        """Hand the process and its control socket over (once); None if already taken."""
        if self._process is None or self._control is None:
            return None
        taken = (self._process, self._control)
        if self._reap_at_close:
            self._adopted = self._process
        self._process = self._control = None
        return taken

    def close(self) -> None:
        """If no run took it: close its socket and kill and reap it.  If a run took it
        and ``reap_at_close`` was asked for: wait until it has exited and reap it.

        Unadopted, it forked no sandbox anyone used (only an adopting run asks for
        one), so killing its process group (it, and its spare if it made one yet:
        ``sandbox/rlm_sandbox/zygote.py``) leaves nothing running, and a command that fails
        early (a usage error) does not wait for a zygote still booting to notice
        its socket closed.
        Adopted, the run killed its sandboxes and closed its socket when it ended:
        the zygote reaps them and exits by itself, and is killed if it has not
        within ``_REAP_TIMEOUT`` seconds.
        """
        taken = self.take()
        if taken is not None:
            process, control = taken
            control.close()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)  # its own session: it and its spare
            process.wait()
        adopted, self._adopted = self._adopted, None
        if adopted is not None:
            try:
                adopted.wait(_REAP_TIMEOUT)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(adopted.pid, signal.SIGKILL)  # its own session: only itself
                adopted.wait()

    def __enter__(self) -> EarlyZygote:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
