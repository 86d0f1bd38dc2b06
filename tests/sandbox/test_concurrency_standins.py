"""The sandbox's concurrent.futures and asyncio stand-ins: the usual results and ordering."""

from __future__ import annotations

import pytest

from tests.sandbox.autobatch_host import FakeHost, block, run_block


def run(code: str, window: int = 16, **host: object) -> tuple[str, str | None]:
    ran = run_block(block(code), window=window, host=FakeHost(**host))  # type: ignore[arg-type]
    return ran.output, ran.error


@pytest.mark.parametrize("window", [0, 16])
def test_executor_map_submit_as_completed_and_wait(window: int) -> None:
    output, error = run("""
        from concurrent.futures import ThreadPoolExecutor, as_completed, wait
        with ThreadPoolExecutor(max_workers=2) as pool:
            print(list(pool.map(len, ["a", "bb", "ccc"])))
            print(list(pool.map(lambda a, b: a + b, [1, 2], [10, 20, 30])))
            futures = [pool.submit(llm_query, f"q{i}") for i in range(3)]
            print([f.result() for f in as_completed(futures)])
            done, not_done = wait([pool.submit(pow, 2, 5)])
            print([f.result() for f in done], not_done, futures[0].done())
        """, window)
    assert error is None
    assert output == ("[1, 2, 3]\n[11, 22]\n['A[q0]', 'A[q1]', 'A[q2]']\n[32] set() True\n")


@pytest.mark.parametrize("window", [0, 16])
def test_an_executor_call_that_raises_raises_at_its_result(window: int) -> None:
    output, error = run("""
        from concurrent.futures import ThreadPoolExecutor
        pool = ThreadPoolExecutor()
        good, bad = pool.submit(int, "1"), pool.submit(int, "x")
        print(good.result(), type(bad.exception()).__name__)
        try:
            bad.result()
        except ValueError as exc:
            print("raised", exc)
        results = pool.map(int, ["1", "x", "3"])
        print(next(results))
        next(results)
        """, window)
    assert output == ("1 ValueError\nraised invalid literal for int() with base 10: 'x'\n1\n")
    assert error is not None and "ValueError" in error


def test_a_shut_down_executor_takes_no_more_and_cancelled_futures_do_not_run() -> None:
    output, error = run("""
        from concurrent.futures import ThreadPoolExecutor, CancelledError
        pool = ThreadPoolExecutor()
        f = pool.submit(print, "never")
        print(f.cancel(), f.cancelled())
        pool.shutdown()
        try:
            pool.submit(print, "late")
        except RuntimeError as exc:
            print(exc)
        try:
            f.result()
        except CancelledError:
            print("cancelled")
        """)
    assert error is None
    assert output == "True True\ncannot schedule new futures after shutdown\ncancelled\n"


@pytest.mark.parametrize("window", [0, 16])
def test_asyncio_gather_create_task_and_exceptions(window: int) -> None:
    output, error = run("""
        import asyncio
        async def double(x):
            await asyncio.sleep(0)
            return 2 * x
        async def fail():
            raise KeyError("k")
        async def main():
            print(await asyncio.gather(double(1), double(2)))
            task = asyncio.create_task(double(5))
            print(await task, task.done())
            print(await asyncio.gather(fail(), double(3), return_exceptions=True))
            try:
                await asyncio.gather(double(1), fail())
            except KeyError as exc:
                print("gather raised", exc)
            print(await asyncio.wait_for(double(4), timeout=1))
            done, pending = await asyncio.wait([asyncio.create_task(double(6))])
            print([t.result() for t in done], pending)
            return [await t for t in asyncio.as_completed([double(7), double(8)])]
        print(asyncio.run(main()))
        """, window)
    assert error is None, error
    assert output == ("[2, 4]\n10 True\n[KeyError('k'), 6]\ngather raised 'k'\n8\n"
                      "[12] set()\n[14, 16]\n")


def test_asyncio_semaphore_limits_how_many_calls_are_out_at_once() -> None:
    code = """
        import asyncio
        async def ask(sem, c):
            async with sem:
                return await asyncio.to_thread(llm_query, c)
        async def main():
            sem = asyncio.Semaphore(4)
            return await asyncio.gather(*(ask(sem, f"c{i}") for i in range(16)))
        print(len(asyncio.run(main())))
        """
    ran = run_block(block(code), window=16)
    assert ran.error is None and ran.output == "16\n"
    assert ran.host.most_in_flight() == 4


def test_asyncio_lock_event_taskgroup_and_a_loop_object() -> None:
    output, error = run("""
        import asyncio
        async def main():
            lock, ready = asyncio.Lock(), asyncio.Event()
            async def waiter():
                await ready.wait()
                return "woken"
            w = asyncio.create_task(waiter())
            async with lock:
                print("locked", lock.locked())
            ready.set()
            print(await w)
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(asyncio.to_thread(str.upper, s)) for s in "ab"]
            print([t.result() for t in tasks])
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(None, len, "four")
        print(asyncio.run(main()))
        loop = asyncio.get_event_loop()
        print(loop.run_until_complete(asyncio.sleep(0, result="slept")))
        """)
    assert error is None, error
    assert output == "locked True\nwoken\n['A', 'B']\n4\nslept\n"


@pytest.mark.parametrize(("code", "message"), [
    ("import asyncio\nasync def main():\n    asyncio.run(main())\nasyncio.run(main())",
     "cannot be called from a running event loop"),
    ("import asyncio\nasyncio.gather()", "no running event loop"),
    ("import asyncio\nasync def main():\n    e = asyncio.Event()\n    await e.wait()\n"
     "asyncio.run(main())", "every task waits"),
    ("import asyncio\nasyncio.run(len)", "a coroutine was expected"),
])
def test_asyncio_misuse_says_what_is_wrong(code: str, message: str) -> None:
    _, error = run(code)
    assert error is not None and message in error


def test_the_main_task_ending_closes_what_it_left_running() -> None:
    output, error = run("""
        import asyncio
        async def forever():
            try:
                while True:
                    await asyncio.sleep(1)
            finally:
                print("closed")
        async def main():
            asyncio.create_task(forever())
            await asyncio.sleep(0)
            return "done"
        print(asyncio.run(main()))
        """)
    assert error is None
    assert output == "closed\ndone\n"


def test_prompts_asked_through_a_helper_in_an_executor_are_sent_ahead() -> None:
    code = """
        from concurrent.futures import ThreadPoolExecutor
        def ask(c):
            return llm_query(f"Summarise: {c}")
        with ThreadPoolExecutor() as pool:
            answers = list(pool.map(ask, [f"c{i}" for i in range(16)]))
        """
    ran = run_block(block(code), window=16)
    assert ran.error is None and ran.host.most_in_flight() == 16


def test_a_task_sleeping_in_a_loop_leaves_the_calls_and_the_others_their_turn() -> None:
    code = """
        import asyncio
        beats = []
        async def heartbeat():
            while True:
                beats.append(asyncio.get_running_loop().time())
                await asyncio.sleep(1)
        async def late(x):
            await asyncio.sleep(2.5)
            return x
        async def main():
            asyncio.create_task(heartbeat())
            answers = await asyncio.gather(
                *(asyncio.to_thread(llm_query, f"c{i}") for i in range(8)))
            print(answers[0], len(answers), await late("late"))
            return asyncio.get_running_loop().time()
        print(asyncio.run(main()), beats)
        """
    ran = run_block(block(code), window=16)
    assert ran.error is None, ran.error
    assert ran.output == "A[c0] 8 late\n2.5 [0.0, 1.0, 2.0]\n"
    assert ran.host.most_in_flight() == 8
