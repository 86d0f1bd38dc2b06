"""Stand-ins for ``concurrent.futures`` and ``asyncio``: one thread, calls batched ahead.

Models that reach for Python's own concurrency write
``ThreadPoolExecutor().map(llm_query, prompts)``, ``submit`` and
``as_completed``, or ``asyncio.gather`` over ``asyncio.to_thread(llm_query, p)``.
The sandbox has no threads and no event loop to give; :func:`modules` gives,
per REPL, modules of the same names whose functions run the submitted calls
one after another, in submission order, through the speculator's lookahead
(:meth:`Speculator.each`): a call of ``llm_query``, or of a function whose
prompts are known, is sent ahead, so the calls still run concurrently on the
host, under its gate.  Results, exceptions and ordering are a valid run of
the real thing (``as_completed`` yields in submission order), and the same
with auto-batching off.

What model code gets: executors, futures, tasks, semaphores, locks, events,
and a loop object with ``run_in_executor``/``run_until_complete`` — all plain
Python objects of this module.  Their state lives in ``__slots__`` (never
readable from model code), the speculator only in closures, and none of them
can be subclassed.  Time is the loop's own: ``asyncio.sleep`` never waits, it
parks its task until the tasks ready and the calls outstanding have run and no
earlier sleeper is left (``loop.time()`` reads that clock); nothing here has
timeouts.  A task that sleeps in a loop therefore leaves the others their turn,
and ends, like any task left running, when the main task does.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import types
from collections import deque
from collections.abc import Callable, Coroutine, Generator, Iterable, Iterator
from typing import Any, NamedTuple, cast

from rlm_sandbox.modules import ModuleProxy
from rlm_sandbox.speculation import Key, Speculator

__all__ = ["modules"]


class _StandIn:
    __slots__ = ()

    def __init_subclass__(cls, **kwargs: object) -> None:
        if cls.__module__ != __name__:
            raise TypeError("the sandbox's concurrency stand-ins cannot be subclassed")
        super().__init_subclass__(**kwargs)


class CancelledError(BaseException):
    """A future or task was cancelled."""

    __module__ = "asyncio"


class InvalidStateError(Exception):
    """A future's result was asked before it was done."""

    __module__ = "asyncio"


def _run_call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
              ) -> tuple[bool, Any]:
    """``fn(*args, **kwargs)``: (True, result) or (False, the exception it raised)."""
    try:
        return True, fn(*args, **kwargs)
    except BaseException as exc:  # a thread of a real pool keeps whatever its call raised
        return False, exc


class _Done(NamedTuple):
    done: set[Any]
    not_done: set[Any]


def modules(speculator: Speculator) -> dict[str, ModuleProxy]:
    """The stand-in modules of one REPL: ``asyncio``, ``concurrent``, ``concurrent.futures``."""
    def predict(call: tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]) -> list[Key]:
        predictor = speculator.predictor_of(call[0])
        return [] if predictor is None else predictor(*call[1], **call[2])

    futures = _futures_module(speculator, predict)
    return {
        "asyncio": _asyncio_module(speculator, predict),
        "concurrent.futures": futures,
        "concurrent": ModuleProxy("concurrent", {"futures": futures}),
    }


# --- concurrent.futures ------------------------------------------------------------------


def _futures_module(speculator: Speculator, predict: Callable[[Any], list[Key]]) -> ModuleProxy:
    class Future(_StandIn):
        """The result of a submitted call; the executor runs its calls when one is asked for."""

        __slots__ = ("_call", "_executor", "_ok", "_outcome", "_state")
        _state: str
        _ok: bool
        _outcome: Any

        def __init__(self, executor: ThreadPoolExecutor, call: tuple[Any, ...]) -> None:
            self._executor, self._call = executor, call
            self._state, self._ok, self._outcome = "pending", True, None

        def _settle(self) -> None:
            if self._state == "pending":
                self._executor._run_all()

        def result(self, timeout: float | None = None) -> Any:
            self._settle()
            if self._state == "cancelled":
                raise CancelledError()
            if not self._ok:
                raise self._outcome
            return self._outcome

        def exception(self, timeout: float | None = None) -> BaseException | None:
            self._settle()
            if self._state == "cancelled":
                raise CancelledError()
            return None if self._ok else cast(BaseException, self._outcome)

        def done(self) -> bool:
            self._settle()
            return True

        def running(self) -> bool:
            return False

        def cancelled(self) -> bool:
            return self._state == "cancelled"

        def cancel(self) -> bool:
            if self._state == "pending":
                self._state = "cancelled"
            return self._state == "cancelled"

        def add_done_callback(self, fn: Callable[[Future], object]) -> None:
            self._settle()
            fn(self)

        def __repr__(self) -> str:
            return f"<Future state={self._state}>"

    class ThreadPoolExecutor(_StandIn):
        """Runs submitted calls in order, sent ahead where their prompts are known."""

        __slots__ = ("_pending", "_shut")

        def __init__(self, max_workers: int | None = None, thread_name_prefix: str = "",
                     initializer: Callable[..., object] | None = None,
                     initargs: tuple[Any, ...] = ()) -> None:
            self._pending: list[Future] = []
            self._shut = False
            if initializer is not None:
                initializer(*initargs)

        def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
            if self._shut:
                raise RuntimeError("cannot schedule new futures after shutdown")
            future = Future(self, (fn, args, kwargs))
            self._pending.append(future)
            return future

        def map(self, fn: Callable[..., Any], *iterables: Iterable[Any],
                timeout: float | None = None, chunksize: int = 1) -> Iterator[Any]:
            submitted = [self.submit(fn, *args) for args in zip(*iterables, strict=False)]

            def results() -> Iterator[Any]:
                for future in submitted:
                    yield future.result()

            return results()

        def _run_all(self) -> None:
            pending = self._pending
            for future in speculator.each(pending, lambda f: predict(f._call)):
                if future._state == "pending":
                    future._ok, future._outcome = _run_call(*future._call)
                    future._state = "finished"
            pending.clear()

        def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
            self._shut = True
            if cancel_futures:
                for future in self._pending:
                    future.cancel()
            self._run_all()

        def __enter__(self) -> ThreadPoolExecutor:
            return self

        def __exit__(self, *exc_info: object) -> None:
            self.shutdown()

    def as_completed(fs: Iterable[Future], timeout: float | None = None) -> Iterator[Future]:
        ordered = list(dict.fromkeys(fs))
        for future in ordered:
            future._settle()
        return iter(ordered)

    def wait(fs: Iterable[Future], timeout: float | None = None,
             return_when: str = "ALL_COMPLETED") -> _Done:
        done = set(as_completed(fs))
        return _Done(done, set())

    return ModuleProxy("concurrent.futures", {
        "ThreadPoolExecutor": ThreadPoolExecutor, "ProcessPoolExecutor": ThreadPoolExecutor,
        "Executor": ThreadPoolExecutor, "Future": Future, "as_completed": as_completed,
        "wait": wait, "CancelledError": CancelledError, "TimeoutError": TimeoutError,
        "FIRST_COMPLETED": "FIRST_COMPLETED", "FIRST_EXCEPTION": "FIRST_EXCEPTION",
        "ALL_COMPLETED": "ALL_COMPLETED",
    })


# --- asyncio -----------------------------------------------------------------------------


class _AsyncFuture(_StandIn):
    """A value that is not there yet; awaiting it parks the task until it is."""

    __slots__ = ("_callbacks", "_exception", "_result", "_state")

    def __init__(self) -> None:
        self._state: str = "pending"
        self._result: Any = None
        self._exception: BaseException | None = None
        self._callbacks: list[Callable[[Any], object]] = []

    def done(self) -> bool:
        return self._state != "pending"

    def cancelled(self) -> bool:
        return self._state == "cancelled"

    def result(self) -> Any:
        if self._state == "pending":
            raise InvalidStateError("the result is not set yet")
        if self._state == "cancelled":
            raise CancelledError()
        if self._exception is not None:
            raise self._exception
        return self._result

    def exception(self) -> BaseException | None:
        if self._state == "pending":
            raise InvalidStateError("the result is not set yet")
        return self._exception

    def set_result(self, value: Any) -> None:
        self._finish("finished", value, None)

    def set_exception(self, exc: BaseException) -> None:
        self._finish("finished", None, exc)

    def cancel(self, msg: object = None) -> bool:
        if self._state != "pending":
            return False
        self._finish("cancelled", None, None)
        return True

    def add_done_callback(self, fn: Callable[[Any], object]) -> None:
        if self.done():
            fn(self)
        else:
            self._callbacks.append(fn)

    def _finish(self, state: str, result: Any, exc: BaseException | None) -> None:
        if self._state != "pending":
            raise InvalidStateError("the future is already done")
        self._state, self._result, self._exception = state, result, exc
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)

    def __await__(self) -> Generator[Any, None, Any]:
        if not self.done():
            yield self  # the task is parked on this future
        return self.result()


class _Event(_StandIn):
    __slots__ = ("_set", "_waiters")

    def __init__(self) -> None:
        self._set, self._waiters = False, deque[_AsyncFuture]()

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(True)

    def clear(self) -> None:
        self._set = False

    async def wait(self) -> bool:
        if not self._set:
            waiter = _AsyncFuture()
            self._waiters.append(waiter)
            await waiter
        return True


class _Semaphore(_StandIn):
    __slots__ = ("_value", "_waiters")

    def __init__(self, value: int = 1) -> None:
        if value < 0:
            raise ValueError("Semaphore initial value must be >= 0")
        self._value, self._waiters = value, deque[_AsyncFuture]()

    def locked(self) -> bool:
        return self._value == 0

    async def acquire(self) -> bool:
        while self._value <= 0:
            waiter = _AsyncFuture()
            self._waiters.append(waiter)
            await waiter
        self._value -= 1
        return True

    def release(self) -> None:
        self._value += 1
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(True)
                return

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()


def _asyncio_module(speculator: Speculator, predict: Callable[[Any], list[Key]]) -> ModuleProxy:
    running: list[Loop] = []  # the loop running now (asyncio.run inside a coroutine refuses)

    class Task(_AsyncFuture):
        """A coroutine driven by the loop, step by step."""

        __slots__ = ("_coro", "_loop")

        def __init__(self, loop: Loop, coro: Coroutine[Any, Any, Any]) -> None:
            super().__init__()
            self._loop, self._coro = loop, coro
            loop._ready.append((self, None))

        def _step(self, value: Any) -> None:
            try:
                if isinstance(value, _AsyncFuture) and value._exception is not None:
                    parked = self._coro.throw(value._exception)
                elif isinstance(value, _AsyncFuture) and value.cancelled():
                    parked = self._coro.throw(CancelledError())
                else:
                    parked = self._coro.send(value._result if isinstance(
                        value, _AsyncFuture) else None)
            except StopIteration as stop:
                self.set_result(stop.value)
            except BaseException as exc:  # the coroutine's own exception: the task's result
                self.set_exception(exc)
            else:
                if not isinstance(parked, _AsyncFuture):
                    self._coro.close()
                    self.set_exception(RuntimeError(
                        f"a task awaited {type(parked).__name__}, which the sandbox's asyncio "
                        "cannot wait for; await coroutines, tasks and asyncio's own functions"))
                    return
                parked.add_done_callback(lambda done: self._loop._ready.append((self, done)))

        def cancel(self, msg: object = None) -> bool:
            if self.done():
                return False
            try:
                self._coro.close()  # its finally blocks run, as on a real cancellation
            except (RuntimeError, ValueError):
                return False  # it is running: it cancels itself by returning
            return super().cancel()

    class Call(_AsyncFuture):
        """A call run "in a thread" (``to_thread``, ``run_in_executor``)."""

        __slots__ = ("_call",)

        def __init__(self, loop: Loop, call: tuple[Any, ...]) -> None:
            super().__init__()
            self._call = call
            loop._calls.append(self)

    class Loop(_StandIn):
        """Runs tasks until they wait for calls, then the calls in order (sent ahead)."""

        __slots__ = ("_calls", "_now", "_ready", "_sleepers", "_tasks", "_turns")

        def __init__(self) -> None:
            self._ready: deque[tuple[Task, Any]] = deque()
            self._calls: list[Call] = []
            self._tasks: list[Task] = []
            self._now = 0.0
            # (when, turn, future): the heap gives sleepers their turn by time, then FIFO
            self._sleepers: list[tuple[float, int, _AsyncFuture]] = []
            self._turns = itertools.count()

        def time(self) -> float:
            return self._now

        def _sleep_until(self, delay: float) -> _AsyncFuture:
            woken = _AsyncFuture()
            turn = next(self._turns)
            heapq.heappush(self._sleepers, (self._now + max(delay, 0.0), turn, woken))
            return woken

        def create_task(self, coro: Coroutine[Any, Any, Any], **kwargs: Any) -> Task:
            if not isinstance(coro, types.CoroutineType):
                raise TypeError(f"a coroutine was expected, got {type(coro).__name__}")
            task = Task(self, coro)
            self._tasks.append(task)
            return task

        def run_in_executor(self, executor: object, fn: Callable[..., Any], *args: Any
                            ) -> Call:
            return Call(self, (fn, args, {}))

        def is_running(self) -> bool:
            return self in running

        def close(self) -> None:
            return None

        def run_until_complete(self, main: Any) -> Any:
            if running:
                raise RuntimeError("this event loop is already running")
            task = main if isinstance(main, Task) else self.create_task(main)
            running.append(self)
            try:
                while not task.done():
                    if self._ready:
                        self._step_once()
                    elif self._calls:
                        self._run_calls(task)
                    elif self._sleepers:
                        self._wake_next_sleeper()
                    else:
                        raise RuntimeError("every task waits for something that nothing "
                                           "left running can do")
            finally:
                running.remove(self)
                self._abandon()
            return task.result()

        def _step_once(self) -> None:
            """Step the tasks ready now, once each; those they make ready wait for the next
            round, so the main task's end is seen between rounds (as asyncio's loop does)."""
            for _ in range(len(self._ready)):
                task, value = self._ready.popleft()
                if not task.done():
                    task._step(value)

        def _step_ready(self, main: Task) -> None:
            while self._ready and not main.done():
                self._step_once()

        def _wake_next_sleeper(self) -> None:
            when, _, woken = heapq.heappop(self._sleepers)
            self._now = max(self._now, when)
            if not woken.done():
                woken.set_result(None)

        def _run_calls(self, main: Task) -> None:
            calls = self._calls
            for call in speculator.each(calls, lambda c: predict(c._call)):
                if not call.done():
                    ok, outcome = _run_call(*call._call)
                    call.set_result(outcome) if ok else call.set_exception(outcome)
                self._step_ready(main)  # what the answer lets run may add calls
                if main.done():
                    break
            calls.clear()  # all ran (or the main task is done, and the rest is abandoned)

        def _abandon(self) -> None:
            """The main task is done: what it left running is closed, as asyncio cancels it."""
            self._ready.clear()
            self._calls.clear()
            self._sleepers.clear()
            tasks, self._tasks = self._tasks, []
            for task in tasks:
                task.cancel()

    def current() -> Loop:
        if not running:
            raise RuntimeError("no running event loop")
        return running[-1]

    def ensure(aw: Any) -> _AsyncFuture:
        if isinstance(aw, _AsyncFuture):
            return aw
        return current().create_task(aw)

    def run(main: Coroutine[Any, Any, Any], *, debug: bool | None = None) -> Any:
        if running:
            if isinstance(main, types.CoroutineType):
                main.close()  # refused: it never runs (no "never awaited" warning)
            raise RuntimeError("asyncio.run() cannot be called from a running event loop")
        return Loop().run_until_complete(main)

    async def to_thread(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        return await Call(current(), (fn, args, kwargs))

    def gather(*aws: Any, return_exceptions: bool = False) -> Task:
        children = [ensure(aw) for aw in aws]

        async def collect() -> list[Any]:
            results = []
            for child in children:
                try:
                    results.append(await child)
                except (Exception, CancelledError) as exc:
                    if not return_exceptions:
                        raise
                    results.append(exc)
            return results

        return current().create_task(collect())

    async def sleep(delay: float, result: Any = None) -> Any:
        await current()._sleep_until(delay)
        return result

    # asyncio's own signatures, timeouts included (nothing here waits for time to pass).
    async def wait_for(aw: Any, timeout: float | None) -> Any:  # noqa: ASYNC109
        return await ensure(aw)

    async def wait(aws: Iterable[Any], *, timeout: float | None = None,  # noqa: ASYNC109
                   return_when: str = "ALL_COMPLETED") -> tuple[set[Any], set[Any]]:
        tasks = [ensure(aw) for aw in aws]
        for task in tasks:
            # wait() reports a failure in the done set; the caller reads it there.
            with contextlib.suppress(Exception, CancelledError):
                await task
        return set(tasks), set()

    def as_completed(aws: Iterable[Any], *, timeout: float | None = None
                     ) -> Iterator[_AsyncFuture]:
        return iter([ensure(aw) for aw in aws])

    class TaskGroup(_StandIn):
        __slots__ = ("_tasks",)

        def __init__(self) -> None:
            self._tasks: list[Task] = []

        def create_task(self, coro: Coroutine[Any, Any, Any], **kwargs: Any) -> Task:
            task = current().create_task(coro)
            self._tasks.append(task)
            return task

        async def __aenter__(self) -> TaskGroup:
            return self

        async def __aexit__(self, *exc_info: object) -> None:
            for task in self._tasks:
                await task

    def event_loop() -> Loop:
        return running[-1] if running else Loop()

    return ModuleProxy("asyncio", {
        "run": run, "gather": gather, "to_thread": to_thread, "sleep": sleep,
        "create_task": lambda coro, **kw: current().create_task(coro),
        "ensure_future": ensure, "wait_for": wait_for, "wait": wait,
        "as_completed": as_completed, "Semaphore": _Semaphore, "BoundedSemaphore": _Semaphore,
        "Lock": lambda: _Semaphore(1), "Event": _Event, "TaskGroup": TaskGroup,
        "get_event_loop": event_loop, "get_running_loop": current, "new_event_loop": Loop,
        "iscoroutine": lambda value: isinstance(value, types.CoroutineType),
        "Future": _AsyncFuture, "Task": Task, "CancelledError": CancelledError,
        "InvalidStateError": InvalidStateError, "TimeoutError": TimeoutError,
        "FIRST_COMPLETED": "FIRST_COMPLETED", "FIRST_EXCEPTION": "FIRST_EXCEPTION",
        "ALL_COMPLETED": "ALL_COMPLETED",
    })

