"""The command line against a local server as llama.cpp's is (issue 31, "Local models"):
the fixture server with a small context, one slot and a queue, and streams without usage.

Each test failed before its fix: no output cap was sent, a context overflow was a bare
HTTP 400, the volley estimate assumed 256 tokens a task.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import trio

from tests.helpers import rlm_in_process, serving

RLM_BIN = [sys.executable, "-m", "rlm"]
NEEDLE = "filler. " * 300 + "The magic number is 6174. " + "more. " * 50


async def rlm(*args: str) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_"))}
    with trio.fail_after(120):
        return await trio.run_process(
            [*RLM_BIN, *args], capture_stdout=True, capture_stderr=True, check=False,
            stdin=subprocess.DEVNULL, env=env,
        )


async def test_a_context_overflow_says_what_to_change_and_the_default_cap_was_sent() -> None:
    # The root's system prompt alone is over 1,000 tokens.
    async with serving(context_limit=1_000) as (url, server):
        done = await rlm("run", "What is the magic number?", "--context", NEEDLE,
                         "--base-url", url, "--model", "fixture")
    err = done.stderr.decode()
    assert done.returncode == 1, err
    assert "maximum context length is 1000 tokens" in err
    assert "4096 in the completion" in err  # the default cap, sent with the request
    assert "The prompt alone does not fit" in err and "larger context" in err
    assert "fewer characters per sub-query" in err
    assert server.stats.by_status == {400: 1}  # not retried: it would not fit again


def test_the_volley_estimate_counts_the_real_cap() -> None:
    shown = rlm_in_process("volley", "a", "b", "--provider", "fixture", "--estimate")
    assert "at most 8,192 output (4,096 per task: --max-tokens)" in shown.stdout, shown.stdout
    assert "256" not in shown.stdout
    capped = rlm_in_process("volley", "a", "b", "--provider", "fixture", "--estimate",
                            "--max-tokens", "100")
    assert "at most 200 output (100 per task: --max-tokens)" in capped.stdout
    uncapped = rlm_in_process("volley", "a", "b", "--provider", "fixture", "--estimate",
                              "--max-tokens", "none")
    assert "~2,048 output (a task with no --max-tokens cap counts 1,024)" in uncapped.stdout


def test_config_show_names_the_default_cap() -> None:
    shown = rlm_in_process("config", "show")
    line = next(line for line in shown.stdout.splitlines() if line.split()[:1] == ["max_tokens"])
    assert line.split()[1] == "4096"


async def test_a_volley_retry_says_the_reason_and_the_task(tmp_path: Path) -> None:
    # One slot, half a second a request, a second to answer: the one that arrives third
    # waits past it (which one that is depends on the order the requests arrive in).
    async with serving(slots=1, sub_latency=0.5) as (url, server):
        done = await rlm("volley", "first task", "second task", "third task", "--base-url", url,
                         "--model", "fixture", "--request-timeout", "1", "--max-concurrent", "3",
                         "--journal", str(tmp_path / "j.sqlite3"), "-y")
    err = done.stderr.decode()
    assert done.returncode == 0, err
    retried = [line for line in err.splitlines() if "retrying in" in line]
    assert retried, err
    assert all("timed out after 1s (--request-timeout), retrying in " in line for line in retried)
    tasks = ("first task", "second task", "third task")
    assert all(any(f"] ⚠ {task}: timed out" in line for task in tasks) for line in retried), \
        retried
    assert "ProviderConnectionError" not in err and "ProviderTimeout" not in err
    assert server.stats.max_queued >= 1


async def test_a_run_shows_each_retry_and_counts_them() -> None:
    async with serving(slots=1, sub_latency=0.5) as (url, _):
        done = await rlm("run", "What is the magic number?", "--context", NEEDLE,
                         "--base-url", url, "--model", "fixture:4", "--request-timeout", "1",
                         "--max-concurrent", "4")
    err = done.stderr.decode()
    assert done.returncode == 0 and done.stdout == b"6174\n", err
    assert "root: ⚠ sub-query timed out after 1s (--request-timeout), retrying in " in err
    summary = next(line for line in err.splitlines() if "run answered in" in line)
    assert " retr" in summary and "LLM calls (" in summary, summary


async def test_a_streamed_volley_shows_its_retries_in_the_task_lines(tmp_path: Path) -> None:
    async with serving(slots=1, sub_latency=0.5, stream_usage=False) as (url, _):
        done = await rlm("volley", "first task", "second task", "third task", "--base-url", url,
                         "--model", "fixture", "--request-timeout", "1", "--max-concurrent", "3",
                         "--stream", "--journal", str(tmp_path / "j.sqlite3"), "-y")
    err = done.stderr.decode()
    assert done.returncode == 0, err
    assert "task] [⚠ timed out after 1s (--request-timeout), retrying in " in err, err


ROOT = Path(__file__).resolve().parents[2]


def _recipe(doc: str, starts: str, within: str = "") -> list[str]:
    """The first command of ``doc``'s ``sh`` blocks (those holding ``within``) that starts
    with ``starts``, as argv."""
    text = (ROOT / doc).read_text(encoding="utf-8")
    for block in re.findall(r"```sh\n(.*?)\n```", text, re.DOTALL):
        for command in block.replace("\\\n", " ").splitlines():
            if within in block and command.startswith(starts):
                return shlex.split(command)
    raise AssertionError(f"no `{starts}` command in {doc}")


async def test_the_local_server_recipe_runs_as_written(tmp_path: Path) -> None:
    """The docs' commands, against the fixture server made a local server as llama.cpp's
    is (one slot, no usage in streams, a context of 8,192 tokens)."""
    (tmp_path / "notes.txt").write_text(NEEDLE)
    full = _recipe("docs/local-models.md", "rlm run", within="--max-tokens 512")
    server = _recipe("docs/local-models.md", "python -m llama_cpp.server")
    assert server[server.index("--n_ctx") + 1] == "8192"
    sub_only = _recipe("docs/local-models.md", "rlm run \"What is the magic number?\" "
                       "--context-file notes.txt --provider fixture")
    for argv in (full, sub_only):
        async with serving(slots=1, stream_usage=False, context_limit=8192) as (url, local):
            args = [url if a == "http://127.0.0.1:8080/v1" else a for a in argv[1:]]
            with trio.fail_after(120):
                done = await trio.run_process(
                    [*RLM_BIN, *args], capture_stdout=True, capture_stderr=True, check=False,
                    stdin=subprocess.DEVNULL, cwd=tmp_path,
                    env={k: v for k, v in os.environ.items()
                         if not k.startswith(("RLM_", "OPENAI_"))},
                )
        assert done.returncode == 0 and done.stdout == b"6174\n", done.stderr
        assert local.stats.sub_requests > 0


def test_the_documented_profile_is_read(tmp_path: Path) -> None:
    text = (ROOT / "docs/local-models.md").read_text(encoding="utf-8")
    (tmp_path / "rlm.toml").write_text(re.findall(r"```toml\n(.*?)```", text, re.DOTALL)[0])
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        shown = rlm_in_process("config", "show", "--profile", "local")
    finally:
        os.chdir(cwd)
    values = {line.split()[0]: line.split()[1] for line in shown.stdout.splitlines()
              if line.startswith("  ")}
    assert shown.returncode == 0, shown.stderr
    assert (values["max_tokens"], values["max_concurrent"]) == ("512", "2")
    assert values["request_timeout"] == "1800.0"
