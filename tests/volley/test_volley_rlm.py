"""``rlm volley --rlm``: every task a whole RLM call over one shared context (loopback, real
sandboxes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import trio

from rlm import RLM, RunConfig
from rlm._events import EventBus
from rlm._run.assembly import default_launcher
from rlm._sandbox.launcher import SandboxLauncher
from rlm._sandbox.spawn import SHARED_CONTEXT_CHARS
from tests.helpers import rlm_in_process, serving

FACTS = {"magic number": "4711", "secret word": "heliotrope", "door code": "9-3-1"}


def big_context() -> str:
    """Over the shared-memory threshold, with one fact in each third."""
    filler = "nothing to see on this line, move along.\n"
    part = filler * (SHARED_CONTEXT_CHARS // len(filler) // 3 + 1)
    lines = [f"{part}The {key} is {value}.\n" for key, value in FACTS.items()]
    text = "".join(lines)
    assert len(text) > SHARED_CONTEXT_CHARS
    return text


async def rlm_volley(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """``rlm volley ARGS`` over a small facts file (``{facts}`` in ARGS), which must exit 0."""
    facts = tmp_path / "facts.txt"
    facts.write_text("".join(f"The {k} is {v}.\n" for k, v in FACTS.items()))
    done = await trio.run_process(
        [sys.executable, "-m", "rlm", "volley", *(str(facts) if a == "{facts}" else a
                                                  for a in args)],
        capture_stdout=True, capture_stderr=True, check=False, stdin=subprocess.DEVNULL,
        env={**os.environ, "RLM_API_KEY": "k", "RLM_JOURNAL": str(tmp_path / "j.db")},
    )
    assert done.returncode == 0, done.stderr.decode()
    return done


async def test_rlm_tasks_share_one_context_and_answer_in_task_order() -> None:
    launchers: list[SandboxLauncher] = []

    def launcher(config: RunConfig, events: EventBus) -> SandboxLauncher:
        made = default_launcher(config, events)
        launchers.append(made)
        return made

    questions = [f"What is the {key}?" for key in FACTS]
    broken = {"prompt": "What is the magic number?", "model": "fixture:0"}  # the server says 400
    async with serving(sub_latency=0.01) as (url, server):
        model = RLM(base_url=url, model="fixture:4", api_key="k", max_concurrent=8,
                    sandboxes=launcher)
        result = await model.avolley([*questions, broken, questions[0]], big_context(), mode="rlm")
    assert [t.index for t in result.tasks] == [1, 2, 3, 4, 5]
    answers = [t.output for t in result.tasks]
    assert answers[:3] == list(FACTS.values()) and answers[4] == FACTS["magic number"]
    # One task's failure is its own: the others answered, the volley says one failed.
    failed = result.tasks[3]
    assert failed.status == "failed" and "fixture:0" in (failed.error or "")
    assert [t.status for t in result.tasks].count("succeeded") == 4
    assert result.status == "failed" and result.summary.failed == 1
    # One launcher for the whole volley, and the 1 MB+ context written to shared memory once.
    assert len(launchers) == 1 and launchers[0].context_memfds == 1
    # Each task: root steps plus four sub-queries, all through the one gate and ledger.
    ok = [t for t in result.tasks if t.status == "succeeded"]
    assert all(t.tokens_input > len(big_context()) // 4 for t in ok)
    assert server.stats.sub_requests == 4 * 4
    assert result.summary.tokens_input == sum(t.tokens_input for t in result.tasks)


async def test_rlm_volley_cli_json_reports_each_task(tmp_path: Path) -> None:
    async with serving() as (url, _server):
        done = await rlm_volley(
            tmp_path, "--rlm", "What is the secret word?", "What is the door code?",
            "--context-file", "{facts}", "--base-url", url, "--model", "fixture:2",
            "--output-format", "json", "-q", "-y", "--no-history")
    report = json.loads(done.stdout)
    tasks = report["tasks"]
    assert [t["output"] for t in tasks] == ["heliotrope", "9-3-1"]
    assert all(t["status"] == "succeeded" and t["tokens_input"] > 0 for t in tasks)
    assert report["summary"]["succeeded"] == 2


async def test_rlm_tasks_kept_in_the_journal_run_as_rlm_calls_when_worked(tmp_path: Path) -> None:
    """The kind of task is part of the stored volley: `create --rlm`, then `work`, then `show`."""
    async def rlm(*args: str) -> subprocess.CompletedProcess[bytes]:
        return await rlm_volley(tmp_path, *args)

    async with serving() as (url, server):
        created = await rlm("create", "--rlm", "What is the door code?",
                            "What is the magic number?", "--context-file", "{facts}",
                            "--base-url", url, "--model", "fixture:2")
        volley_id = created.stdout.decode().strip()
        await rlm("work", volley_id, "-q")
        shown = await rlm("show", volley_id, "--output-format", "json")
    # Each task is an RLM call: a root step whose code asks a sub-model about 2 chunks.
    assert server.stats.root_requests == 2 and server.stats.sub_requests == 2 * 2
    tasks = json.loads(shown.stdout)["tasks"]
    assert [t["output"] for t in tasks] == [FACTS["door code"], FACTS["magic number"]]


async def test_rlm_volley_stream_labels_each_task_s_root_text(tmp_path: Path) -> None:
    async with serving() as (url, _server):
        done = await rlm_volley(
            tmp_path, "--rlm", "--stream", "What is the secret word?", "What is the door code?",
            "--context-file", "{facts}", "--base-url", url, "--model", "fixture:2", "-y",
            "--no-history")
    lines = done.stderr.decode().splitlines()
    titles = {1: "What is the secret word?", 2: "What is the door code?"}
    for index in (1, 2):  # each task's root step, its code ending in FINAL_VAR
        mine = [line for line in lines if line.startswith(f"[{index}/2 {titles[index]}] ")]
        assert any("llm_query_batched(" in line for line in mine), lines
        assert any("FINAL_VAR(" in line for line in mine), lines
    # Sub-query answers are not mixed into the tasks' text.
    assert not any(line.endswith(("] heliotrope", "] NOT FOUND")) for line in lines)


def shout(key: str) -> str:
    """Upper-case a key on the host."""
    return key.upper()


def test_rlm_tasks_offer_the_models_host_tools_to_their_code() -> None:
    model = RLM(provider="fixture", tools=[shout])
    result = model.volley(["Call shout('abc')", "Call shout(5)"], "some context", mode="rlm")
    assert [t.output for t in result.tasks] == [
        "ABC", "ToolError: shout: argument 'key': 5 is not of type 'string'",
    ]


def test_create_with_tools_says_to_give_them_to_the_worker(tmp_path: Path) -> None:
    # It was click's bare "No such option: --tools", which says nothing of where tools go.
    done = rlm_in_process("volley", "create", "--rlm", "--provider", "fixture", "--context",
                          "c", "--tools", "mod:fn", "hi", env={"RLM_JOURNAL": str(tmp_path / "j")})
    assert done.returncode == 2
    assert done.stderr.startswith("Error: --tools is not stored in the journal")
    assert "`rlm volley work ID`" in done.stderr and "--resume" in done.stderr
    assert not (tmp_path / "j").exists()  # nothing recorded


def test_rlm_volley_tools_reach_each_task_and_each_worker(tmp_path: Path) -> None:
    (tmp_path / "s16tools_volley.py").write_text(
        'def shout(key: str) -> str:\n    """Upper-case a key."""\n    return key.upper()\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_"))}
    env["RLM_JOURNAL"] = str(tmp_path / "j.db")

    def rlm(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(Path(sys.executable).with_name("rlm")), "volley", *args], capture_output=True,
            text=True, timeout=60, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
        )

    fixture = ("--provider", "fixture", "--context", "some context")
    done = rlm("--rlm", *fixture, "--tools", "s16tools_volley:shout", "Call shout('abc')",
               "--output-format", "json", "-q", "--no-history")
    assert done.returncode == 0, done.stderr
    assert [t["output"] for t in json.loads(done.stdout)["tasks"]] == ["ABC"]
    # Stored without its tools (a function is not data): the worker is given them.
    volley_id = rlm("create", "--rlm", *fixture, "Call shout('xyz')").stdout.strip()
    worked = rlm("work", volley_id, "--tools", "s16tools_volley:shout", "-q")
    assert worked.returncode == 0, worked.stderr
    shown = json.loads(rlm("show", volley_id, "--output-format", "json").stdout)
    assert [t["output"] for t in shown["tasks"]] == ["XYZ"]
    refused = rlm(*fixture, "--tools", "s16tools_volley:shout", "hi", "-q", "--no-history")
    assert refused.returncode == 2 and refused.stderr.startswith("Error: --tools needs --rlm")
