"""`rlm eval` against the fixture server over loopback: the 60-item eval killed -9 half-way
and resumed (nothing finished is paid for again; the report equals an uninterrupted run's),
and a user's own scorer beside the judge scorer, whose verdicts are cached."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from rlm.journal import open_store
from rlm.testing.server import FixtureServer, FixtureServerOptions

RLM = [sys.executable, "-m", "rlm"]
SIXTY = ["needle", "--tiers", "2k,20k,200k", "--per-tier", "20", "--seed", "3"]


class HoldingServer(FixtureServer):
    """The fixture server, counting chat requests; past ``answer_first`` it holds them
    (received, counted, unanswered) until ``release``, so a client can be killed at a known
    point however fast the machine is."""

    def __init__(self, answer_first: int | None = None) -> None:
        super().__init__(FixtureServerOptions())
        self.received = 0
        self.answer_first = answer_first
        self.holding = trio.Event()
        self.release = trio.Event()

    async def _complete(self, chat: Any) -> Any:
        self.received += 1
        if self.answer_first is not None and self.received > self.answer_first:
            self.holding.set()
            await self.release.wait()
        return await super()._complete(chat)


@asynccontextmanager
async def serving(server: HoldingServer) -> AsyncIterator[str]:
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        yield f"http://127.0.0.1:{port}/v1"
        server.release.set()
        nursery.cancel_scope.cancel()


def env(cwd: Path | None = None) -> dict[str, str]:
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_"))}
    if cwd is not None:
        kept["PYTHONPATH"] = os.pathsep.join([str(cwd), kept.get("PYTHONPATH", "")])
    return {**kept, "RLM_API_KEY": "k"}


async def rlm(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(180):
        done = await trio.run_process([*RLM, *args], capture_stdout=True, capture_stderr=True,
                                      check=False, env=env(cwd), cwd=cwd)
    return done


def flags(url: str, journal: Path) -> list[str]:
    return ["--base-url", url, "--model", "fixture", "--journal", str(journal), "-y", "-q",
            "--output-format", "json", "--no-history"]


def finished(journal: Path) -> dict[int, str]:
    store = open_store(str(journal))
    try:
        (volley,) = store.volleys()
        return {r.index: r.status for r in store.tasks(volley.volley_id)
                if r.status in ("done", "failed")}
    finally:
        store.close()


def comparable(report: dict[str, Any]) -> dict[str, Any]:
    """A report without what differs between two runs of the same eval: its id and time,
    wall-clock latencies, and where each task's trace went."""
    timing = ("latency_p50", "latency_p95")
    arms = [{k: v for k, v in arm.items() if k not in (*timing, "tiers")}
            | {"tiers": [{k: v for k, v in t.items() if k not in timing} for t in arm["tiers"]]}
            for arm in report["arms"]]
    items = [{k: v for k, v in i.items() if k not in ("latency", "trace")}
             for i in report["items"]]
    return {"arms": arms, "items": items, "tiers": report["tiers"], "status": report["status"]}


async def test_a_killed_eval_resumes_paying_for_nothing_finished_and_reports_the_same(
        tmp_path: Path) -> None:
    whole = HoldingServer()
    async with serving(whole) as url:
        done = await rlm("eval", *SIXTY, *flags(url, tmp_path / "whole.sqlite3"))
    assert done.returncode == 0, done.stderr.decode()
    uninterrupted = json.loads(done.stdout)
    assert uninterrupted["status"] == "complete" and len(uninterrupted["items"]) == 120

    journal = tmp_path / "killed.sqlite3"
    half = HoldingServer(answer_first=whole.received // 2)
    async with serving(half) as url:
        proc = await trio.lowlevel.open_process(
            [*RLM, "eval", *SIXTY, *flags(url, journal)], env=env(),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            with trio.fail_after(120):
                await half.holding.wait()
                # Another process writes the journal: nothing here could set an Event.
                while len(finished(journal) if journal.exists() else {}) < 10:  # noqa: ASYNC110
                    await trio.sleep(0.05)
                await trio.sleep(0.5)  # let verdicts under way reach the journal
        finally:
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
        before = finished(journal)
        sent_before = half.received
        half.release.set()
        resumed = await rlm("eval", "--resume", "last", *flags(url, journal))
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert 10 <= len(before) < 120, "the kill did not land half-way"
    report = json.loads(resumed.stdout)
    # The resume sent exactly what the unfinished tasks needed: not one request of a task
    # finished before the kill.
    unfinished = sum(i["calls"] for i in report["items"] if i["task"] not in before)
    assert half.received - sent_before == unfinished
    assert comparable(report) == comparable(uninterrupted)


async def test_a_users_scorer_and_the_judge_against_a_loopback_server(tmp_path: Path) -> None:
    (tmp_path / "closeness.py").write_text(
        "def close(output, item):\n"
        "    return abs(int(output) - int(item['answer'])) <= 1\n")
    lines = [
        {"id": "own-right", "question": "What is the door code?",
         "context": "The door code is 41.", "answer": 42, "scorer": "closeness:close"},
        {"id": "own-wrong", "question": "What is the door code?",
         "context": "The door code is 40.", "answer": 42, "scorer": "closeness:close"},
        {"id": "judged-right", "question": "What is the secret word?",
         "context": "The secret word is heliotrope.", "answer": "Heliotrope"},
        {"id": "judged-wrong", "question": "What is the secret word?",
         "context": "The secret word is tulip.", "answer": "heliotrope"},
    ]
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(line) + "\n" for line in lines))
    server = HoldingServer()
    async with serving(server) as url:
        journal = tmp_path / "j.sqlite3"
        done = await rlm("eval", str(data), "--arm", "direct", "--scorer", "judge",
                         "--judge-model", "fixture", *flags(url, journal), cwd=tmp_path)
        assert done.returncode == 0, done.stderr.decode()
        report = json.loads(done.stdout)
        sent = server.received
        again = await rlm("eval", "show", "last", "--journal", str(journal),
                          "--output-format", "json", cwd=tmp_path)
        assert again.returncode == 0, again.stderr.decode()
        assert server.received == sent  # the judge's verdicts came from the journal
    scores = {i["item"]: i["score"] for i in report["items"]}
    assert scores == {"own-right": 1.0, "own-wrong": 0.0, "judged-right": 1.0,
                      "judged-wrong": 0.0}
    judge = report["scoring"]["judge"]
    assert (judge["model"], judge["verdicts"], judge["calls"], judge["cached"]) == (
        "fixture", 2, 2, 0)
    shown = json.loads(again.stdout)
    assert shown["scoring"]["judge"]["calls"] == 0 and shown["scoring"]["judge"]["cached"] == 2
    assert {i["item"]: i["score"] for i in shown["items"]} == scores


async def read_all(stream: Any, into: list[bytes]) -> None:
    while chunk := await stream.receive_some():
        into.append(chunk)


async def test_ctrl_c_reports_what_finished_and_says_how_to_resume(tmp_path: Path) -> None:
    journal = tmp_path / "j.sqlite3"
    server = HoldingServer(answer_first=2)
    async with serving(server) as url:
        proc = await trio.lowlevel.open_process(
            [*RLM, "eval", "needle", "--tiers", "2k", "--per-tier", "4", "--arm", "direct",
             *flags(url, journal)], env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            with trio.fail_after(120):
                await server.holding.wait()
                while len(finished(journal) if journal.exists() else {}) < 2:  # noqa: ASYNC110
                    await trio.sleep(0.05)
                proc.send_signal(signal.SIGINT)
                outs: list[bytes] = []
                errs: list[bytes] = []
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(read_all, proc.stdout, outs)
                    nursery.start_soon(read_all, proc.stderr, errs)
                out, said = b"".join(outs), b"".join(errs)
                code = await proc.wait()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    report = json.loads(out)
    assert code == 130, said
    assert report["status"] == "incomplete" and report["arms"][0]["finished"] == 2
    text = said.decode()
    assert f"interrupted: the report counts what finished; `rlm eval --resume " \
           f"{report['eval_id']}` runs the rest" in text, text
    assert "Error:" not in text and "Traceback" not in text
