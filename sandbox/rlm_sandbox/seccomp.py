"""A seccomp filter, assembled by hand as classic BPF (x86-64 only).

The filter is a deny-list: the syscalls below fail with EPERM, everything
else is allowed.  A deny-list is the right trade here because the sandbox
runs an unmodified CPython whose needs (mmap, brk, futex, read, write ...)
vary by version, while what we refuse is short and stable:

- creating or using new network endpoints: ``socket``, ``socketpair``,
  ``connect``, ``bind``, ``listen``, ``accept``/``accept4`` (recv/send on the
  protocol pipes and the already-open context socket stay possible);
- new processes and threads, and new programs: ``fork``, ``vfork``,
  ``clone``, ``clone3``, ``execve``, ``execveat``;
- signals to anyone but itself: ``kill``/``tkill``/``tgkill``/``rt_*sigqueueinfo``
  are allowed only when their first argument is the sandbox's own pid;
- looking into or steering other processes: ``ptrace``,
  ``process_vm_readv/writev``, the ``pidfd_*`` calls;
- changing identity, namespaces, mounts, the kernel or the clock
  (``setuid`` family, ``unshare``, ``setns``, ``mount`` family, modules,
  ``bpf``, ``perf_event_open``, ``keyctl``, ``io_uring_*``, ``userfaultfd`` ...).

A syscall from another ABI (i386 or x32 on an x86-64 kernel) kills the
process: the numbers below mean nothing there.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct

__all__ = ["DENIED_SYSCALLS", "build_filter", "install_filter", "supported"]

# struct seccomp_data offsets
_NR = 0
_ARCH = 4
_ARG0_LOW = 16  # args[0], low 32 bits (little-endian); pid_t is a 32-bit int

# classic BPF opcodes
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K

_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000
_EPERM = 1

_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_SYSCALL_BIT = 0x40000000

#: x86-64 syscall numbers refused with EPERM.
DENIED_SYSCALLS: dict[str, int] = {
    "socket": 41, "connect": 42, "accept": 43, "bind": 49, "listen": 50,
    "socketpair": 53, "accept4": 288,
    "clone": 56, "fork": 57, "vfork": 58, "execve": 59, "execveat": 322, "clone3": 435,
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
    "pidfd_open": 434, "pidfd_getfd": 438, "pidfd_send_signal": 424,
    "setuid": 105, "setgid": 106, "setreuid": 113, "setregid": 114, "setgroups": 116,
    "setresuid": 117, "setresgid": 119, "setfsuid": 122, "setfsgid": 123, "capset": 126,
    "unshare": 272, "setns": 308, "chroot": 161, "pivot_root": 155,
    "mount": 165, "umount2": 166, "open_tree": 428, "move_mount": 429, "fsopen": 430,
    "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
    "init_module": 175, "finit_module": 313, "delete_module": 176,
    "kexec_load": 246, "kexec_file_load": 320, "reboot": 169, "swapon": 167, "swapoff": 168,
    "bpf": 321, "perf_event_open": 298, "keyctl": 250, "add_key": 248, "request_key": 249,
    "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "personality": 135, "acct": 163, "quotactl": 179,
    "sethostname": 170, "setdomainname": 171, "settimeofday": 164, "clock_settime": 227,
    "adjtimex": 159, "clock_adjtime": 305, "iopl": 172, "ioperm": 173,
    "open_by_handle_at": 304, "name_to_handle_at": 303, "mknod": 133, "mknodat": 259,
    "fanotify_init": 300, "lookup_dcookie": 212, "move_pages": 279, "migrate_pages": 256,
    # System V and POSIX message IPC: objects that could outlive the sandbox.
    "shmget": 29, "shmat": 30, "shmctl": 31, "semget": 64, "semop": 65, "semctl": 66,
    "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71, "semtimedop": 220, "mq_open": 240,
}

#: Signal-sending syscalls allowed only when args[0] is the sandbox's own pid.
SELF_ONLY_SYSCALLS: dict[str, int] = {
    "kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297,
}

_INSTRUCTION = struct.Struct("=HBBI")


def supported() -> str | None:
    """None when this machine can use the filter, else the reason it cannot."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return f"the filter is written for x86-64, not {platform.machine()}"
    return None


def _stmt(code: int, k: int) -> bytes:
    return _INSTRUCTION.pack(code, 0, 0, k)


def _jump(code: int, k: int, jt: int, jf: int) -> bytes:
    if not (0 <= jt <= 255 and 0 <= jf <= 255):  # pragma: no cover - the tables are short
        raise ValueError("BPF jump out of range")
    return _INSTRUCTION.pack(code, jt, jf, k)


def build_filter(own_pid: int) -> bytes:
    """The BPF program (a packed ``sock_filter`` array) for a sandbox whose pid is ``own_pid``."""
    denied = sorted(set(DENIED_SYSCALLS.values()))
    self_only = sorted(set(SELF_ONLY_SYSCALLS.values()))
    program: list[bytes] = [
        _stmt(_LD_W_ABS, _ARCH),
        _jump(_JEQ_K, _AUDIT_ARCH_X86_64, 1, 0),
        _stmt(_RET_K, _RET_KILL_PROCESS),
        _stmt(_LD_W_ABS, _NR),
        _jump(_JGE_K, _X32_SYSCALL_BIT, 0, 1),
        _stmt(_RET_K, _RET_KILL_PROCESS),
    ]
    # Layout after this point, with D = len(denied), S = len(self_only):
    #   D x  "nr == denied[i]   -> DENY"
    #   S x  "nr == self_only[j] -> CHECK_PID"
    #   ALLOW; CHECK_PID: load arg0; "arg0 == own_pid -> ALLOW2"; DENY; ALLOW2
    tail = len(self_only) + 1  # instructions between the deny checks and CHECK_PID
    for index, number in enumerate(denied):
        to_deny = (len(denied) - index - 1) + tail + 2  # skip to the DENY instruction
        program.append(_jump(_JEQ_K, number, to_deny, 0))
    for index, number in enumerate(self_only):
        to_check = len(self_only) - index  # skip the rest and ALLOW
        program.append(_jump(_JEQ_K, number, to_check, 0))
    program += [
        _stmt(_RET_K, _RET_ALLOW),
        _stmt(_LD_W_ABS, _ARG0_LOW),  # CHECK_PID
        _jump(_JEQ_K, own_pid & 0xFFFFFFFF, 1, 0),
        _stmt(_RET_K, _RET_ERRNO | _EPERM),  # DENY
        _stmt(_RET_K, _RET_ALLOW),
    ]
    return b"".join(program)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2


def install_filter(libc: ctypes.CDLL, own_pid: int) -> None:
    """Install the filter on the calling thread (needs no-new-privs first); OSError if refused."""
    program = build_filter(own_pid)
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // _INSTRUCTION.size, ctypes.addressof(buffer))
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl(PR_SET_SECCOMP) failed: {os.strerror(errno)}")
