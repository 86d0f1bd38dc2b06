"""Landlock through ctypes: read-only access to a few paths, nothing else.

A ruleset *handles* every file-system right the running kernel knows (per its
ABI version) and grants back only read and execute beneath the given paths
(the interpreter and its libraries).  Everything else is denied, whatever the
Unix permissions say: writing anywhere, reading ``/proc/<host pid>/environ``
or the project tree.  From ABI 4 TCP bind/connect is handled with no rule
(denied); from ABI 6 the domain is *scoped*: no signals to processes outside
it and no connecting to abstract Unix sockets outside it.

Build the ruleset while the paths are still openable (before the uid drop),
restrict after no-new-privs.
"""

from __future__ import annotations

import ctypes
import os
import struct

__all__ = ["Ruleset", "abi_version"]

_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1

_EXECUTE = 1 << 0
_READ_FILE = 1 << 2
_READ_DIR = 1 << 3
_FS_RIGHTS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
_NET_BIND_TCP = 1 << 0
_NET_CONNECT_TCP = 1 << 1
_SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
_SCOPE_SIGNAL = 1 << 1

_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.syscall.restype = ctypes.c_long


def _syscall(*args: int | None) -> int:
    # Variadic: every argument must be passed at full register width (a bare
    # Python int would go as a 32-bit C int and truncate pointers).
    result = int(_LIBC.syscall(*(ctypes.c_long(arg or 0) for arg in args)))
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))
    return result


def abi_version() -> int:
    """The kernel's Landlock ABI version; OSError (ENOSYS, EOPNOTSUPP) when unavailable."""
    return _syscall(_SYS_CREATE_RULESET, None, 0, _CREATE_RULESET_VERSION)


def _fs_rights(abi: int) -> int:
    return _FS_RIGHTS_BY_ABI[max(v for v in _FS_RIGHTS_BY_ABI if v <= abi)]


class Ruleset:
    """An open Landlock ruleset fd.  ``restrict_self`` consumes it."""

    def __init__(self, read_only_paths: list[str]) -> None:
        self.abi = abi_version()
        handled_fs = _fs_rights(self.abi)
        fields = [handled_fs]
        if self.abi >= 4:
            fields.append(_NET_BIND_TCP | _NET_CONNECT_TCP)
        if self.abi >= 6:
            fields.append(_SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL)
        attr = ctypes.create_string_buffer(struct.pack(f"={len(fields)}Q", *fields))
        self.handled = {
            "fs": True, "tcp": self.abi >= 4, "signals-and-abstract-sockets": self.abi >= 6,
        }
        self.fd = _syscall(_SYS_CREATE_RULESET, ctypes.addressof(attr), len(attr.raw), 0)
        try:
            for path in read_only_paths:
                self._allow_read(path)
        except BaseException:
            os.close(self.fd)
            raise

    def _allow_read(self, path: str) -> None:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except FileNotFoundError:
            return
        try:
            rights = _EXECUTE | _READ_FILE
            if os.path.isdir(path):
                rights |= _READ_DIR
            rule = ctypes.create_string_buffer(struct.pack("=Qi", rights, fd))
            _syscall(_SYS_ADD_RULE, self.fd, _RULE_PATH_BENEATH, ctypes.addressof(rule), 0)
        finally:
            os.close(fd)

    def restrict_self(self) -> None:
        """Confine the calling thread (and its future children) for good."""
        try:
            _syscall(_SYS_RESTRICT_SELF, self.fd, 0)
        finally:
            os.close(self.fd)
