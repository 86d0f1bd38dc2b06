"""Where calls get their sandboxes: the launcher, its zygote and its warm pool.

Inside :meth:`SandboxLauncher.serving` (the runtime wraps each run in it) a
zygote is started and a small pool of spawned, hardened sandboxes is kept
ready, so opening a sandbox costs one ``init`` round trip.  Outside it, or
when the zygote cannot start, every sandbox is spawned directly (slower,
same isolation except the parent-death signal).  Either way the context is
passed inline when small and as a sealed memfd when large, and every sandbox
a launcher created is killed when ``serving`` exits.

``Sandbox``, ``SandboxIdentity`` and ``ExecResult`` live in ``_sandbox.py``
and are re-exported here.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections import deque
from collections.abc import AsyncIterator, Iterable

import trio

from rlm._config import DEFAULT_SANDBOX_MEMORY
from rlm._events import EventBus, SandboxMemoryWait
from rlm._run.context import context_chars
from rlm._sandbox.early import EarlyZygote
from rlm._sandbox.isolation import IsolationUnavailable, check_required, parse_layers
from rlm._sandbox.memory import MemoryCeiling, MemoryWait, memory_ceiling, open_gauge
from rlm._sandbox.process import (
    BridgeHandler,
    ChildProcess,
    ExecResult,
    HostEnds,
    Sandbox,
    SandboxIdentity,
)
from rlm._sandbox.spawn import SHARED_CONTEXT_CHARS, ChildEnds, context_memfd, spawn_direct
from rlm._sandbox.zygote import Zygote
from rlm.errors import SandboxCrashed, SandboxError

__all__ = [
    "BridgeHandler", "ExecResult", "HostEnds", "Sandbox", "SandboxIdentity", "SandboxLauncher",
]

DEFAULT_POOL_SIZE = 2
DEFAULT_MEMORY_BYTES = DEFAULT_SANDBOX_MEMORY
DEFAULT_CPU_SECONDS = 3600


class SandboxLauncher:
    """Where calls get their sandboxes.  One per run.

    ``require_isolation`` names child layers that must be active: a sandbox
    without one is killed and IsolationUnavailable raised.  ``early_zygote``
    is a zygote started at process start (:mod:`rlm._sandbox.early`): the
    first run adopts it instead of starting its own.  Each sandbox may use
    ``memory_bytes``; what the sandboxes calls hold at once really use stays
    within ``ceiling`` bytes together (default: half the machine's memory,
    :mod:`rlm._sandbox.memory`; inside ``serving``, one cgroup v2 holds them
    where the kernel allows).  With ``pool_on_demand`` the warm pool
    starts filling only once a second sandbox is asked for (or someone waits
    for a full pool): a run at depth 1 only ever opens its root's.  Without
    ``pool_refills`` the pool is filled once and a sandbox taken from it is not
    replaced: the calls after the first few fork theirs while their first step is
    generated, and the run does not end with unused sandboxes to kill and reap.
    """

    def __init__(
        self,
        *,
        events: EventBus,
        max_output_chars: int,
        require_isolation: Iterable[str] = (),
        pool_size: int = DEFAULT_POOL_SIZE,
        memory_bytes: int = DEFAULT_MEMORY_BYTES,
        use_zygote: bool = True,
        early_zygote: EarlyZygote | None = None,
        tools: Iterable[str] = (),
        answer_json: bool = False,
        ceiling: int | None = None,
        pool_on_demand: bool = False,
        pool_refills: bool = True,
    ) -> None:
        self._events = events
        self._memory = MemoryCeiling(
            per_sandbox=memory_bytes, ceiling=memory_ceiling() if ceiling is None else ceiling,
            on_wait=self._waiting_for_memory,
        )
        self._tools = list(tools)
        self._answer_json = answer_json
        self._max_output_chars = max_output_chars
        self._required = parse_layers(require_isolation)
        self._pool_size = pool_size
        self._pool_refills = pool_refills
        self._memory_bytes = memory_bytes
        self._use_zygote = use_zygote
        self._early_zygote = early_zygote
        self._nursery: trio.Nursery | None = None
        self._zygote: Zygote | None = None
        self._zygote_settled = trio.Event()
        self._pool: deque[Sandbox] = deque()
        self._pool_wanted = trio.Event()
        self._pool_full = trio.Event()
        # Set when the pool may start filling.  On demand, that is the second open(): two
        # forks nobody uses would take CPU from the root's first step and fan-out.
        self._pool_demanded = trio.Event()
        if not pool_on_demand:
            self._pool_demanded.set()
        self._opened = 0
        # Calls waiting in open(): the pool forks only while none is, so a call's own fork
        # never queues behind a pool fork at the zygote (the root's, first of all).
        self._opening = 0
        self._none_opening = trio.Event()
        self._created: list[Sandbox] = []
        self._shared: dict[int, tuple[str | list[str], int]] = {}
        self._writing: dict[int, tuple[str | list[str], trio.Event]] = {}
        #: Large contexts written to a memfd so far (a volley's tasks share one).
        self.context_memfds = 0

    @property
    def zygote(self) -> Zygote | None:
        """The running zygote, if any (for diagnostics)."""
        return self._zygote

    @property
    def pooled(self) -> int:
        """How many spawned sandboxes are waiting in the pool."""
        return len(self._pool)

    async def wait_pool_full(self) -> None:
        """Return once the warm pool is full (or cannot be filled); for benchmarks and tests.
        A pool filled on demand is demanded by this."""
        self._pool_demanded.set()
        await self._pool_full.wait()

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[SandboxLauncher]:
        """Run the zygote and the warm pool for the body's duration; on exit (however
        it happens) every sandbox this launcher made, and the zygote, are killed."""
        self._memory.gauge = open_gauge(self._memory.ceiling)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                if self._use_zygote:
                    nursery.start_soon(self._keep_pool_filled, nursery)
                else:
                    self._zygote_settled.set()
                try:
                    yield self
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            # After the nursery: a zygote still starting when the body ended is
            # recorded by now, so it is closed here too.
            self._nursery = None
            with trio.CancelScope(shield=True):
                await self._close_everything()
            self._memory.close()  # every sandbox is reaped: its cgroup is empty

    async def open(
        self, nursery: trio.Nursery, *, context: str | list[str], owner: SandboxIdentity
    ) -> Sandbox:
        """A ready sandbox holding ``context``.  The caller must ``aclose`` it.

        A pooled sandbox that turns out dead (say its zygote was killed) is
        replaced by a freshly spawned one, once.
        """
        requested_at = self._events.now()
        self._opened += 1
        if self._opened > 1:
            self._pool_demanded.set()
        self._opening += 1
        try:
            await self._memory.acquire(owner)
            try:
                box = await self._open_reserved(nursery, context, owner, requested_at)
            except BaseException:
                self._memory.release(owner)
                raise
        finally:
            self._opening -= 1
            if not self._opening:
                self._none_opening.set()
        self._memory.attach(owner, box.pid)
        box.on_close = functools.partial(self._memory.release, owner, box.pid)
        return box

    def _waiting_for_memory(self, wait: MemoryWait) -> None:
        owner = wait.owner
        self._events.emit(SandboxMemoryWait(
            call_id=owner.call_id, parent_id=owner.parent_id, depth=owner.depth,
            used_bytes=wait.used, ceiling_bytes=wait.ceiling, sandboxes=wait.sandboxes,
            gauge=wait.gauge))

    async def _open_reserved(self, nursery: trio.Nursery, context: str | list[str],
                             owner: SandboxIdentity, requested_at: float) -> Sandbox:
        context_fd = await self._context_fd(context)
        try:
            box = self._take_pooled()
            if box is not None:
                try:
                    await self._initialize(box, context, context_fd, owner, requested_at)
                    return box
                except SandboxCrashed:
                    pass  # initialize() closed it; spawn a fresh one below
            box = await self._spawn(self._nursery or nursery)
            await self._initialize(box, context, context_fd, owner, requested_at)
            return box
        finally:
            if context_fd is not None and self._nursery is None:
                os.close(context_fd)  # not cached outside serving()

    def kill_all(self) -> None:
        """Kill every sandbox this launcher made, now (reaping happens when serving ends)."""
        for box in self._created:
            box.kill("interrupted")

    def finish(self) -> None:
        """The call this launcher serves has ended: kill every sandbox now and let the
        zygote go, which reaps them all and exits while the run finishes its own work.

        Synchronous.  ``serving``'s exit then waits for all of it, so nothing outlives
        the run; until then the sandboxes die, and the zygote exits, at the same time
        instead of one after another at the very end.  Nothing is forked after this.
        """
        for box in self._created:
            box.kill("closed")
        if self._zygote is not None:
            self._zygote.close_soon()

    def _take_pooled(self) -> Sandbox | None:
        while self._pool:
            box = self._pool.popleft()
            if self._pool_refills:
                self._pool_wanted.set()
                self._pool_full = trio.Event()
            if box.alive:
                return box
            # Died while waiting: never handed out; closed with the rest at the end.
        return None

    async def _initialize(self, box: Sandbox, context: str | list[str], context_fd: int | None,
                          owner: SandboxIdentity, requested_at: float) -> None:
        await box.initialize(
            context=context, context_fd=context_fd, max_output_chars=self._max_output_chars,
            owner=owner, requested_at=requested_at, tools=self._tools,
            answer_json=self._answer_json,
        )
        try:
            check_required(box.layers, self._required)
        except IsolationUnavailable:
            await box.aclose()
            raise

    async def probe(self) -> Sandbox:
        """A ready sandbox with an empty context, owned by ``doctor`` (caller closes it)."""
        return await self.open(
            self._nursery or _no_nursery(), context="", owner=SandboxIdentity("doctor", None, 0))

    # -- spawning ----------------------------------------------------------------

    async def _spawn(self, nursery: trio.Nursery, *, pooled: bool = False) -> Sandbox:
        """A hardened sandbox.  A pool's warms up before it is announced (nobody waits
        for it yet); one a call waits for answers ``ready`` first and warms up while
        the call's first step is generated."""
        if self._use_zygote and self._nursery is not None:
            await self._zygote_settled.wait()
        zygote = self._zygote
        try:
            ends = ChildEnds()
        except OSError as exc:  # EMFILE, ENOMEM: this machine's limits, not the run's doing
            raise SandboxError(_cannot_start(exc)) from exc
        try:
            if zygote is not None and zygote.alive:
                process: ChildProcess = await zygote.spawn(
                    ends, memory_bytes=self._memory_bytes, cpu_seconds=DEFAULT_CPU_SECONDS,
                    warm=pooled)
            else:
                process = await spawn_direct(ends, self._memory_bytes)
        except OSError as exc:
            ends.close_all()
            raise SandboxError(_cannot_start(exc)) from exc
        except BaseException:
            ends.close_all()
            raise
        ends.close_child()
        box = Sandbox(process, ends.host(), self._events)
        self._created.append(box)
        box.start_draining(nursery)
        if zygote is not None and zygote.alive:
            try:
                await box.wait_hardened()  # a pooled sandbox is ready to serve, not just forked
            except BaseException:
                await box.aclose()
                raise
        return box

    async def _start_zygote(self) -> Zygote:
        """The zygote started at process start if one was handed in and is free, else a new one."""
        if self._early_zygote is not None:
            try:
                return await Zygote.adopt(self._early_zygote)
            except SandboxCrashed:
                pass  # taken by an earlier run, or it died: start one of our own
        return await Zygote.start()

    async def _keep_pool_filled(self, nursery: trio.Nursery) -> None:
        try:
            self._zygote = await self._start_zygote()
        except SandboxError:
            return  # sandboxes are spawned directly instead
        finally:
            self._zygote_settled.set()
        await self._pool_demanded.wait()
        try:
            while True:
                while len(self._pool) < self._pool_size:
                    while self._opening:
                        self._none_opening = trio.Event()
                        await self._none_opening.wait()
                    self._pool.append(await self._spawn(nursery, pooled=True))
                self._pool_full.set()
                if not self._pool_refills:
                    return  # filled once: a sandbox taken is not replaced
                self._pool_wanted = trio.Event()
                await self._pool_wanted.wait()
        except SandboxError:
            return  # the pool stays as it is; open() spawns on demand
        finally:
            self._pool_full.set()

    async def _context_fd(self, context: str | list[str]) -> int | None:
        if context_chars(context) < SHARED_CONTEXT_CHARS:
            return None
        # Many calls opening at once (a volley's --rlm tasks) write it once.
        while (writing := self._writing.get(id(context))) is not None and writing[0] is context:
            await writing[1].wait()
        cached = self._shared.get(id(context))
        if cached is not None and cached[0] is context:
            return cached[1]
        if self._nursery is None:
            self.context_memfds += 1
            return await trio.to_thread.run_sync(context_memfd, context)  # the caller closes it
        done = trio.Event()
        self._writing[id(context)] = (context, done)
        try:
            fd = await trio.to_thread.run_sync(context_memfd, context)
            self.context_memfds += 1
        finally:
            del self._writing[id(context)]
            done.set()
        cached = self._shared.get(id(context))
        if cached is not None and cached[0] is context:  # another call wrote it meanwhile
            os.close(fd)
            return cached[1]
        self._shared[id(context)] = (context, fd)  # holding `context` pins its id
        return fd

    async def _close_everything(self) -> None:
        self._pool.clear()
        boxes, self._created = list(self._created), []
        for box in boxes:  # kill every one first, then reap them all at once
            box.kill("closed")
        if self._zygote is not None:
            # The zygote reaps every sandbox it forked as it exits: one step for all of
            # them, where a reap exchange each took a few milliseconds one after another.
            # Their handles then only close their pipes (the zygote is gone, so none waits).
            await self._zygote.aclose()
            self._zygote = None
        async with trio.open_nursery() as nursery:
            for box in boxes:
                nursery.start_soon(box.aclose)
        for _, fd in self._shared.values():
            os.close(fd)
        self._shared.clear()


def _no_nursery() -> trio.Nursery:
    raise RuntimeError("SandboxLauncher.probe() needs serving()")


def _cannot_start(exc: OSError) -> str:
    """What a person reads when the OS refuses a sandbox its pipes or its process."""
    return (
        f"cannot start a sandbox: {exc.strerror or exc}. This is a limit of this machine or "
        "user (open files: `ulimit -n`; processes; memory), not of the run: see docs/sandbox.md"
    )
