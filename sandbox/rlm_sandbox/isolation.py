"""The process layer: OS limits applied in the sandbox before any model code runs.

:func:`harden` applies each layer in turn and returns a report, one entry per
layer: ``"active"`` or ``"unavailable: <why>"``.  A layer the kernel refuses
is reported, never fatal: the host decides (``--require-isolation``) whether a
run may go on without it.  Order matters:

1. ``fds``: close every inherited descriptor except the protocol ones;
2. ``netns``: fresh, empty network and System V IPC namespaces (needs root, or an
   unprivileged user namespace);
3. ``rlimits``: address space, CPU time, open files, file size, core dumps,
   processes;
4. the Landlock ruleset is built while the interpreter's paths are still
   openable, then ``uid``: a different unprivileged uid (``UID_BASE + pid``,
   so two sandboxes never share one) when started as root;
5. ``no-new-privs``, then ``parent-death-signal`` (a uid change clears it, so
   it comes after);
6. ``landlock``: read-only access to the interpreter and its libraries;
7. ``seccomp``: the syscall filter of ``seccomp.py``, last.

Everything model code may import must be imported before (:func:`preload`):
after the uid drop and Landlock the interpreter cannot read its own library.
"""

from __future__ import annotations

import codecs
import contextlib
import ctypes
import importlib
import os
import resource
import signal
import sys

from rlm_sandbox import seccomp
from rlm_sandbox.landlock import Ruleset
from rlm_sandbox.modules import ALLOWED_MODULES
from rlm_sandbox.protocol import ISOLATION_LAYERS

__all__ = ["LAYERS", "PENDING", "Limits", "apply_limits", "harden", "preload"]

LAYERS = ISOLATION_LAYERS

#: Sandboxes started as root run as UID_BASE + their pid (an unused, unnamed uid).
UID_BASE = 0x7000_0000
NOBODY = 65534
ACTIVE = "active"
PENDING = "pending"  # a spare's limits, until it is given them

_CLONE_NEWNET = 0x40000000
_CLONE_NEWIPC = 0x08000000  # System V IPC objects die with the sandbox
_CLONE_NEWUSER = 0x10000000
_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38
_PR_GET_NO_NEW_PRIVS = 39


class Limits:
    """Resource limits for one sandbox (defaults suit text analysis)."""

    def __init__(self, memory_bytes: int = 4 << 30, cpu_seconds: int = 3600,
                 open_files: int = 64) -> None:
        self.memory_bytes = memory_bytes
        self.cpu_seconds = cpu_seconds
        self.open_files = open_files


def preload() -> None:
    """Import everything the sandbox may need later, while files can still be read."""
    for name in sorted(ALLOWED_MODULES):
        importlib.import_module(name)
    from rlm_sandbox import modules, worker

    for name in sorted(ALLOWED_MODULES):
        modules.import_module(name)  # build the proxies now: they are cached
    _ = worker.Repl  # imported above; named so the import is not "unused"
    # ZoneInfo(key) of a key the system's database lacks looks in the tzdata package
    # through importlib.resources: ZoneInfoNotFoundError, not an ImportError.
    importlib.import_module("importlib.resources")
    # Installed, the tzdata package is where ZoneInfo looks for a key the system lacks,
    # but it lies outside what a hardened sandbox may read (PermissionError, not
    # ZoneInfoNotFoundError): ZoneInfo reads the system's database only.
    sys.modules.setdefault("tzdata", None)  # type: ignore[arg-type]
    for encoding in modules.standard_codecs():  # codec modules load lazily
        with contextlib.suppress(LookupError):  # aliases, and mbcs and oem off Windows
            codecs.lookup(encoding)


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _errno_text(prefix: str) -> str:
    errno = ctypes.get_errno()
    return f"{prefix}: {os.strerror(errno)} (errno {errno})"


def _close_fds(keep: set[int]) -> str:
    lower = 0
    for fd in [*sorted(keep), os.sysconf("SC_OPEN_MAX")]:
        if fd > lower:
            os.closerange(lower, fd)
        lower = max(lower, fd + 1)
    left = {int(name) for name in os.listdir("/proc/self/fd")} - keep
    # listdir's own descriptor is closed again by now; anything else is a leak.
    left = {fd for fd in left if _fd_is_open(fd)}
    return ACTIVE if not left else f"unavailable: descriptors {sorted(left)} stayed open"


def _fd_is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _unshare_net(libc: ctypes.CDLL) -> str:
    if libc.unshare(_CLONE_NEWNET | _CLONE_NEWIPC) == 0:
        return ACTIVE
    first = _errno_text("unshare(CLONE_NEWNET | CLONE_NEWIPC) refused")
    if os.geteuid() != 0 and libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET | _CLONE_NEWIPC) == 0:
        return ACTIVE
    return "unavailable: " + first + (
        "; user namespaces are not allowed either" if os.geteuid() != 0 else "")


def apply_limits(limits: Limits) -> str:
    """Set a hardened spare's resource limits (see :func:`harden`); the ``rlimits`` entry."""
    return _set_rlimits(limits)


def _set_rlimits(limits: Limits) -> str:
    wanted = {
        resource.RLIMIT_AS: limits.memory_bytes,
        resource.RLIMIT_CPU: limits.cpu_seconds,
        resource.RLIMIT_NOFILE: limits.open_files,
        resource.RLIMIT_FSIZE: 0,
        resource.RLIMIT_CORE: 0,
    }
    failed = []
    for which, value in wanted.items():
        try:
            _, hard = resource.getrlimit(which)
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            hard_value = value + 5 if which == resource.RLIMIT_CPU else value  # SIGXCPU first
            if hard != resource.RLIM_INFINITY:
                hard_value = min(hard_value, hard)
            resource.setrlimit(which, (value, hard_value))
        except (OSError, ValueError) as exc:
            failed.append(f"{which}: {exc}")
    return ACTIVE if not failed else "unavailable: " + "; ".join(failed)


def _drop_uid() -> str:
    if os.geteuid() != 0:
        return f"unavailable: not started as root (already runs as unprivileged uid {os.getuid()})"
    errors = []
    for uid in (UID_BASE + os.getpid(), NOBODY):
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        except OSError as exc:
            errors.append(f"uid {uid}: {exc}")
            continue
        # One process per uid: no fork, no threads (seccomp refuses them too).
        resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))
        return ACTIVE
    return "unavailable: " + "; ".join(errors)


def _no_new_privs(libc: ctypes.CDLL) -> str:
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return "unavailable: " + _errno_text("prctl(PR_SET_NO_NEW_PRIVS)")
    return ACTIVE if libc.prctl(_PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1 else "unavailable: not set"


def _parent_death_signal(libc: ctypes.CDLL, parent: int | None) -> str:
    if parent is None:
        return ("unavailable: started directly by a multi-threaded host (the signal would "
                "fire when the spawning thread exits); the zygote sets it")
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return "unavailable: " + _errno_text("prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)
    return ACTIVE


def _read_only_paths() -> list[str]:
    import zoneinfo

    import msgpack
    import RestrictedPython

    import rlm_sandbox

    # The packages themselves, not their parents: the sandbox package sits in
    # the project tree, which must stay unreadable.
    paths = {
        os.path.dirname(os.__file__),  # the standard library
        os.path.dirname(rlm_sandbox.__file__ or ""),
        os.path.dirname(msgpack.__file__ or ""),
        os.path.dirname(RestrictedPython.__file__ or ""),
        os.path.realpath(sys.executable),
        # The time zone database ZoneInfo(key) reads (keys cannot leave it).
        *(path for path in zoneinfo.TZPATH if os.path.isdir(path)),
    }
    return sorted(p for p in paths if p)


def harden(keep_fds: set[int], limits: Limits | None, parent: int | None) -> dict[str, str]:
    """Apply every layer; return ``{layer: "active" | "unavailable: why"}``.

    ``parent`` is the pid whose death must kill this process (the zygote), or
    None when started directly.  ``limits`` None: the zygote's spare sandbox,
    hardened before anyone asked for it, sets its limits with
    :func:`apply_limits` once it is given them (lowering a limit needs no
    privilege, and the seccomp filter allows it), before any model code runs;
    until then ``rlimits`` reads ``pending``.
    """
    libc = _libc()
    report = {"fds": _close_fds(keep_fds), "netns": _unshare_net(libc),
              "rlimits": _set_rlimits(limits) if limits is not None else PENDING}
    ruleset: Ruleset | None = None
    try:
        ruleset = Ruleset(_read_only_paths())
    except OSError as exc:
        report["landlock"] = f"unavailable: the kernel refused Landlock ({exc.strerror})"
    report["uid"] = _drop_uid()
    report["no-new-privs"] = _no_new_privs(libc)
    report["parent-death-signal"] = _parent_death_signal(libc, parent)
    if ruleset is not None:
        try:
            ruleset.restrict_self()
            report["landlock"] = ACTIVE
        except OSError as exc:
            report["landlock"] = f"unavailable: landlock_restrict_self failed ({exc.strerror})"
    reason = seccomp.supported()
    if reason is not None:
        report["seccomp"] = "unavailable: " + reason
    elif report["no-new-privs"] != ACTIVE:
        report["seccomp"] = "unavailable: needs no-new-privs"
    else:
        try:
            seccomp.install_filter(libc, os.getpid())
            report["seccomp"] = ACTIVE
        except OSError as exc:
            report["seccomp"] = f"unavailable: {exc.strerror}"
    return {layer: report[layer] for layer in LAYERS}
