"""End to end: the real `rlm` CLI against the fixture server over loopback HTTP.

Real sockets and real subprocesses, so these tests use trio's real clock.  Usage
errors, which start nothing, go through the same entry point in this process.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from rlm.fixtures.needle import generate_needle
from tests.helpers import rlm_in_process, serving

RLM = [sys.executable, "-m", "rlm"]
QUESTION = "What is the magic number?"


async def rlm(
    *args: str, stdin: bytes = b"", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_"))}
    full_env.update(env or {})
    with trio.fail_after(60):
        return await trio.run_process(
            [*RLM, *args],
            stdin=stdin,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=full_env,
        )


@pytest.fixture
def needle_file(tmp_path: Path) -> tuple[Path, str]:
    fixture = generate_needle(400_000, seed=7, depth=0.63)
    path = tmp_path / "haystack.txt"
    path.write_text(fixture.text, encoding="utf-8")
    return path, fixture.answer


@pytest.mark.parametrize("model", ["fixture", "fixture-sequential"])
async def test_needle_over_http_json_and_trace(
    tmp_path: Path, needle_file: tuple[Path, str], model: str
) -> None:
    path, answer = needle_file
    trace = tmp_path / "run.jsonl"
    async with serving(sub_latency=0.01) as (url, server):
        done = await rlm(
            "run",
            QUESTION,
            "--context-file",
            str(path),
            "--base-url",
            url,
            "--model",
            model,
            "--json",
            "--trace",
            str(trace),
        )
    assert done.returncode == 0, done.stderr.decode()
    out = json.loads(done.stdout)
    assert set(out) >= {"answer", "status", "iterations", "usage", "duration_s", "trace"}
    assert out["answer"] == answer and out["status"] == "answered"
    assert set(out["usage"]) == {"llm_calls", "input_tokens", "output_tokens"}
    assert out["usage"]["llm_calls"] == server.stats.total_requests
    assert out["usage"]["input_tokens"] > 100_000 // 4
    assert out["trace"] == str(trace) and out["answered_by"] == ["fixture"]
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [e["event"] for e in events[:2]] == ["trace_started", "run_started"]
    assert events[-1]["event"] == "run_finished"
    assert all({"t", "call_id", "parent_id", "depth"} <= set(e) for e in events)
    kinds = {e["event"] for e in events}
    assert {
        "call_started",
        "step_completed",
        "code_executed",
        "bridge_call_finished",
        "llm_request",
        "llm_response",
        "sandbox_started",
        "sandbox_exited",
    } <= kinds
    bridge = [e for e in events if e["event"] == "bridge_call_started"]
    expected_fn = "llm_query_batched" if model == "fixture" else "llm_query"
    assert bridge and all(e["fn"] == expected_fn for e in bridge)


async def test_stdout_carries_only_the_answer(needle_file: tuple[Path, str]) -> None:
    path, answer = needle_file
    async with serving() as (url, _):
        done = await rlm(
            "run", QUESTION, "--context-file", str(path), "--base-url", url, "--model", "fixture"
        )
    assert done.returncode == 0
    assert done.stdout.decode() == answer + "\n"
    assert b"fixture" in done.stderr  # the honest note


async def test_in_process_fixture_provider_reads_stdin(needle_file: tuple[Path, str]) -> None:
    path, answer = needle_file
    done = await rlm(
        "run",
        QUESTION,
        "--context-file",
        "-",
        "--provider",
        "fixture",
        "-q",
        stdin=path.read_bytes(),
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().strip() == answer


async def test_several_context_files_make_a_list(tmp_path: Path) -> None:
    fixture = generate_needle(50_000, seed=2)
    files = []
    for i, text in enumerate([fixture.text[:20_000], fixture.text[20_000:]]):
        files += ["--context-file", str(tmp_path / f"doc{i}.txt")]
        (tmp_path / f"doc{i}.txt").write_text(text)
    done = await rlm("run", QUESTION, *files, "--provider", "fixture", "--json", "-q")
    assert done.returncode == 0, done.stderr.decode()
    assert json.loads(done.stdout)["answer"] == fixture.answer


def test_missing_context_file_is_a_usage_error(tmp_path: Path) -> None:
    done = rlm_in_process(
        "run", QUESTION, "--context-file", str(tmp_path / "nope.txt"), "--provider", "fixture"
    )
    assert done.returncode == 2
    assert "Error: context file" in done.stderr and "nope.txt" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


async def test_non_utf8_input_says_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "latin.txt"
    path.write_bytes("caf\xe9 the magic number is 1234567.".encode("latin-1"))
    done = await trio.to_thread.run_sync(
        lambda: rlm_in_process("run", QUESTION, "--context-file", str(path), "--provider",
                               "fixture"))
    assert done.returncode == 2 and "--encoding" in done.stderr
    ok = await rlm(
        "run",
        QUESTION,
        "--context-file",
        str(path),
        "--provider",
        "fixture",
        "--encoding",
        "latin-1",
        "-q",
    )
    assert ok.returncode == 0 and ok.stdout.strip() == b"1234567"


async def test_unreachable_url_names_the_url(needle_file: tuple[Path, str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    # One retry, not the default three: the refused connection is still retried, then named.
    done = await rlm(
        "run", QUESTION, "--context-file", str(needle_file[0]), "--base-url", url, "--model", "m",
        "--max-retries", "1",
    )
    assert done.returncode == 1
    assert f"127.0.0.1:{port}".encode() in done.stderr and b"Traceback" not in done.stderr


async def test_non_json_reply_names_the_url_and_what_came_back(
    needle_file: tuple[Path, str],
) -> None:
    async with serving(garbage=True) as (url, _):
        done = await rlm(
            "run",
            QUESTION,
            "--context-file",
            str(needle_file[0]),
            "--base-url",
            url,
            "--model",
            "fixture",
            "--json",
        )
    assert done.returncode == 1
    assert url.encode() in done.stderr and b"Bad Gateway" in done.stderr
    assert json.loads(done.stdout)["status"] == "error"


async def test_refused_credentials_exit_4_after_one_request(
    needle_file: tuple[Path, str],
) -> None:
    async with serving(api_key="right-key") as (url, server):
        done = await rlm(
            "run",
            QUESTION,
            "--context-file",
            str(needle_file[0]),
            "--base-url",
            url,
            "--model",
            "fixture",
            env={"RLM_API_KEY": "wrong-key-canary"},
        )
    assert done.returncode == 4
    assert server.stats.total_requests == 1
    assert b"wrong-key-canary" not in done.stderr + done.stdout


async def test_the_right_key_is_sent_from_the_environment(needle_file: tuple[Path, str]) -> None:
    path, answer = needle_file
    async with serving(api_key="right-key") as (url, _):
        done = await rlm(
            "run",
            QUESTION,
            "--context-file",
            str(path),
            "--base-url",
            url,
            "--model",
            "fixture",
            "-q",
            env={"RLM_API_KEY": "right-key"},
        )
    assert done.returncode == 0 and done.stdout.decode().strip() == answer


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--root-permits", "8", "--max-concurrent", "8"], b"--root-permits"),
        (["--max-concurrent", "0"], b"--max-concurrent"),
        (["--exec-timeout", "-1"], b"--exec-timeout"),
        (["--provider", "openai"], b"--model"),
        (["--max-llm-calls", "0"], b"--max-llm-calls"),
        (["--max-total-tokens", "-5"], b"--max-total-tokens"),
        (["--max-cost", "0"], b"--max-cost"),
        (["--rpm", "0"], b"--rpm"),
        (["--burst", "0"], b"--burst"),
        (["--max-retries", "-1"], b"--max-retries"),
        (["--max-cost", "1", "--sub-model", "mystery-9"], b"has no price"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(args: list[str], flag: bytes) -> None:
    base = [] if "--provider" in args else ["--provider", "fixture"]
    done = rlm_in_process("run", QUESTION, *base, *args)
    assert done.returncode == 2 and flag.decode() in done.stderr
    assert "Traceback" not in done.stderr


def test_help_is_honest_about_the_fixture() -> None:
    done = rlm_in_process("--help")
    assert done.returncode == 0
    assert "not a language model" in " ".join(done.stdout.split())


def test_a_broken_price_table_is_a_usage_error(tmp_path: Path) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text('{\n  "fixture": {"input": 0, "output": 0},\n  oops\n}\n')
    done = rlm_in_process("run", QUESTION, "--provider", "fixture", "--prices", str(prices))
    assert done.returncode == 2
    assert "prices.json is not valid JSON" in done.stderr and "line 3" in done.stderr
