"""A volley through a batch service, in virtual time: a fake service (injected through
the constructor) and a real SQLite journal; polling, finding what a stop left at the
provider, the budget at batch prices, results read again, Ctrl-C, cancel, retry-live."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, BinaryIO

import pytest
import trio

from rlm._config import RunConfig, VolleyOptions
from rlm._traffic.prices import PriceTable
from rlm._traffic.usage import estimate_io
from rlm.errors import ProviderConnectionError, RateLimitError
from rlm.journal._threads import inline_run_sync
from rlm.journal.batches import batches
from rlm.providers.base import Completion, CompletionRequest
from rlm.providers.batch import Accept, BatchOutcome, BatchState, encode_body
from rlm.testing.provider import FunctionProvider
from rlm.volley.batch import BatchVolley
from rlm.volley.events import BatchSubmitted
from rlm.volley.journaled import JournaledVolley
from rlm.volley.layout import RequestLayout
from rlm.volley.records import VolleyTask


class FakeService:
    """A batch service in memory: a batch ends ``delay`` seconds (trio's clock) after it
    was created; ``fail`` names requests that error.  It notes when it was polled."""

    name = "openai"
    needs_upload = True
    max_requests = 1000
    max_bytes = 1 << 30
    head, separator, tail = b"", b"\n", b"\n"

    def __init__(self, delay: float = 100.0, fail: frozenset[int] = frozenset()) -> None:
        self.delay, self.fail = delay, fail
        self.uploads: dict[str, tuple[str, bytes]] = {}
        self.created: dict[str, tuple[float, list[str]]] = {}
        self.cancelled: set[str] = set()
        self.polls: list[float] = []
        self.refuse_polls: list[float] = []  # Retry-After of the next polls refused
        self.lose_create = 0  # creates that take effect, then fail as if timed out
        self.break_results_after = 0  # result chunks read before the connection drops
        self.chunk = 500  # results handed on at a time
        self.upload_time = 1.0  # seconds an upload takes

    def body(self, request: CompletionRequest) -> bytes:
        return encode_body({"model": request.model, "messages": request.messages})

    def item(self, custom_id: str, body: bytes) -> bytes:
        return b'{"custom_id":' + encode_body(custom_id) + b',"body":' + body + b"}"

    async def find_upload(self, label: str, size: int) -> str | None:
        return next((fid for fid, (name, data) in self.uploads.items() if name == label), None)

    async def upload(self, label: str, file: BinaryIO, size: int) -> str:
        await trio.sleep(self.upload_time)
        file_id = f"file-{len(self.uploads) + 1}"
        self.uploads[file_id] = (label, file.read())
        return file_id

    async def find(self, label: str, file_id: str | None, since: float,
                   count: int) -> BatchState | None:
        for batch_id in self.created:
            if batch_id.endswith(f"-{file_id}"):
                return self._state(batch_id)
        return None

    async def create(self, label: str, file_id: str | None, file: BinaryIO,
                     size: int) -> BatchState:
        assert file_id is not None
        lines = self.uploads[file_id][1].splitlines()
        batch_id = f"batch{len(self.created) + 1}-{file_id}"
        self.created[batch_id] = (trio.current_time(),
                                  [json.loads(line)["custom_id"] for line in lines if line])
        if self.lose_create:
            self.lose_create -= 1
            raise ProviderConnectionError("timed out", url="http://x")
        return self._state(batch_id)

    async def get(self, batch_id: str) -> BatchState:
        self.polls.append(trio.current_time())
        if self.refuse_polls:
            raise RateLimitError("slow down", url="http://x", status=429, retryable=True,
                                 retry_after=self.refuse_polls.pop(0))
        return self._state(batch_id)

    async def cancel(self, batch_id: str) -> BatchState:
        self.cancelled.add(batch_id)
        return self._state(batch_id)

    def _state(self, batch_id: str) -> BatchState:
        started, ids = self.created[batch_id]
        ended = batch_id in self.cancelled or trio.current_time() >= started + self.delay
        status = "cancelled" if batch_id in self.cancelled else "completed" if ended \
            else "in_progress"
        return BatchState(batch_id, status, ended, len(ids),
                          succeeded=len(ids) if ended else 0, output={"id": batch_id})

    async def results(self, state: BatchState, accept: Accept, chunk: int = 500) -> None:
        _, ids = self.created[state.id]
        outcomes = []
        for cid in ids:
            index = int(cid.rpartition("-t")[2])
            if state.id in self.cancelled:
                outcomes.append(BatchOutcome(cid, error="cancelled: not run"))
            elif index in self.fail:
                outcomes.append(BatchOutcome(cid, error="errored: bad request"))
            else:
                outcomes.append(BatchOutcome(cid, completion=Completion(
                    f"answer {index}", "gpt-4.1-mini", input_tokens=100, output_tokens=10)))
        for number, start in enumerate(range(0, len(outcomes), self.chunk)):
            if self.break_results_after and number == self.break_results_after:
                raise ProviderConnectionError("connection reset", url="http://x")
            await accept(outcomes[start:start + self.chunk])


CONFIG = RunConfig(provider="openai", base_url="http://x/v1", model="gpt-4.1-mini",
                   max_tokens=10)


def _volley(tmp_path: Path, n: int, config: RunConfig = CONFIG, **options: Any) -> tuple[
        JournaledVolley, VolleyOptions, Any]:
    journal = JournaledVolley(str(tmp_path / "j.sqlite3"))
    opts = VolleyOptions(**{"batch_api": True, "batch_poll": 10.0, **options})
    tasks = [VolleyTask(i, f"task {i}") for i in range(1, n + 1)]
    volley_id = journal.create(tasks, [], config, opts)
    return journal, opts, journal.load(volley_id)


def _batch(journal: JournaledVolley, stored: Any, service: FakeService,
           options: VolleyOptions, config: RunConfig = CONFIG, **more: Any) -> BatchVolley:
    return BatchVolley(journal.store, stored, config, options, service=service,
                       run_sync=inline_run_sync, **more)


async def test_polls_back_off_by_half_up_to_twelve_times_and_retry_after_wins(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    journal, options, stored = _volley(tmp_path, 3)
    service = FakeService(delay=1000.0)
    service.refuse_polls = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 300.0]
    result = await _batch(journal, stored, service, options).run()
    assert result.status == "succeeded" and [t.output for t in result.tasks] == [
        "answer 1", "answer 2", "answer 3"]
    gaps = [round(b - a, 3) for a, b in zip(service.polls, service.polls[1:], strict=False)]
    assert gaps[:6] == [10.0, 15.0, 22.5, 33.75, 50.625, 75.938]
    assert gaps[6] == 300.0  # the provider's Retry-After, longer than the back-off
    assert max(gaps[7:]) == 120.0  # twelve times batch_poll at most


async def test_a_create_that_timed_out_is_found_not_sent_again(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    journal, options, stored = _volley(tmp_path, 4)
    service = FakeService(delay=50.0)
    service.lose_create = 1
    events: list[Any] = []
    result = await _batch(journal, stored, service, options, sinks=[events.append]).run()
    assert result.status == "succeeded" and len(service.created) == 1
    (sent,) = [e for e in events if isinstance(e, BatchSubmitted)]
    assert sent.found and sent.tasks == 4


async def test_max_cost_at_batch_prices_stops_what_is_sent(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    request = RequestLayout([], model="gpt-4.1-mini", max_tokens=10).request(
        VolleyTask(1, "task 1"), "t1")
    price = PriceTable.default().batch().lookup("gpt-4.1-mini")
    assert price is not None
    each = price.cost(*estimate_io(request))  # what one request reserves at batch prices
    config = dataclasses.replace(CONFIG, max_cost=3.5 * each)  # at live prices: one
    journal, options, stored = _volley(tmp_path, 10, config)
    service = FakeService(delay=5.0)
    result = await _batch(journal, stored, service, options, config=config).run()
    ((_, ids),) = service.created.values()
    assert len(ids) == 3 and result.status == "budget_exceeded"
    assert result.error is not None and "max_cost" in result.error
    assert [t.status for t in result.tasks][:4] == ["succeeded"] * 3 + ["cancelled"]
    assert result.summary.total_cost is not None and result.summary.total_cost > 0


async def test_results_read_again_after_a_drop_are_paid_for_once(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    journal, options, stored = _volley(tmp_path, 10)
    service = FakeService(delay=5.0, fail=frozenset({4}))
    service.break_results_after, service.chunk = 1, 4
    with pytest.raises(ProviderConnectionError):
        await _batch(journal, stored, service, options).run()  # the first chunk only
    (row,) = batches(journal.store, stored.volley_id)
    assert row.stage == "ended"
    service.break_results_after = 0
    got: list[int] = []
    first = await _batch(journal, journal.load(stored.volley_id), service, options,
                         on_result=lambda r: got.append(r.index)).run()
    assert first.status == "failed" and len(service.created) == 1  # not sent again
    assert [t.status for t in first.tasks].count("succeeded") == 9
    assert first.tasks[3].error == "provider batch batch1-file-1: errored: bad request"
    assert journal.store.spent(stored.volley_id).calls == 10  # each task counted once
    assert set(got) == set(range(1, 11)) - {1, 2, 3, 4}  # the rest, reported once written


async def test_ctrl_c_leaves_the_batch_at_the_provider_and_says_what_to_do(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    journal, options, stored = _volley(tmp_path, 3)
    service = FakeService(delay=10_000.0)
    run = _batch(journal, stored, service, options)
    results = []

    async def main() -> None:
        results.append(await run.run())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(main)
        await trio.sleep(100)
        run.interrupt()
    (result,) = results
    assert result.status == "interrupted" and result.error is not None
    assert f"rlm volley --resume {stored.volley_id}" in result.error
    assert f"rlm volley cancel {stored.volley_id}" in result.error
    (row,) = batches(journal.store, stored.volley_id)
    assert row.stage == "submitted" and not service.cancelled
    assert [t.status for t in journal.store.tasks(stored.volley_id)] == ["in_progress"] * 3
    assert journal.store.live_workers(stored.volley_id, 600) == 1  # (at least 1): it left


async def test_cancel_drops_unsent_batches_and_cancels_the_sent_ones(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    journal, options, stored = _volley(tmp_path, 6, batch_size=3)
    service = FakeService(delay=10_000.0)
    run = _batch(journal, stored, service, options)
    service.upload = _upload_once(service)  # type: ignore[method-assign]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run.run)
        await trio.sleep(50)  # batch 1 sent, batch 2's upload never answers
        run.interrupt()
        nursery.cancel_scope.cancel()
    assert [b.stage for b in batches(journal.store, stored.volley_id)] == ["submitted",
                                                                           "planned"]
    again = journal.load(stored.volley_id)
    result = await _batch(journal, again, service, options, cancel=True).run()
    assert service.cancelled == {"batch1-file-1"} and len(service.created) == 1
    assert result.status == "failed"
    errors = [t.error for t in result.tasks]
    assert errors[:3] == ["provider batch batch1-file-1: cancelled: not run"] * 3
    assert all("before it was sent" in (e or "") for e in errors[3:])


def _upload_once(service: FakeService) -> Any:
    original = service.upload

    async def upload(label: str, file: BinaryIO, size: int) -> str:
        if service.uploads:
            await trio.sleep_forever()
        return await original(label, file, size)

    return upload


async def test_retry_live_runs_just_the_failed_tasks_through_the_gate(tmp_path: Path) -> None:
    # Real time: the live part works the journal in threads, and an autojumping clock
    # would run past its tasks' timeouts while a thread commits.
    journal, options, stored = _volley(tmp_path, 6, retry_live=True, batch_poll=0.02)

    async def answer(request: CompletionRequest) -> str:
        return "live answer"

    live = FunctionProvider(answer)
    service = FakeService(delay=0.1, fail=frozenset({2, 5}))
    service.upload_time = 0.0
    result = await journal.work(stored, CONFIG, options, batch_service=service,
                                providers={"root": live, "sub": live})
    assert result.status == "succeeded"
    assert [t.output for t in result.tasks] == [
        "answer 1", "live answer", "answer 3", "answer 4", "live answer", "answer 6"]
    assert len(live.requests) == 2 and result.summary.batch_tasks == 4
    assert [b["stage"] for b in result.batches] == ["collected"]

