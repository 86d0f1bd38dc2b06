"""A newcomer's first hour (issue 11): each defect, silence and habit, through the real CLI."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import subprocess
import sys
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest
from click.testing import CliRunner

from rlm import RLM
from rlm.cli import main
from rlm.cli._context_input import read_context
from rlm.errors import UsageError
from rlm.fixtures import __all__ as fixture_names
from tests.helpers import rlm_in_process

RLM_CMD = [sys.executable, "-m", "rlm"]
QUESTION = "What is the magic number?"
README = Path(__file__).resolve().parents[2] / "README.md"


def cli(
    *args: str,
    stdin: bytes | None = b"",
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    stdin_fd: int | None = None,
    stderr: int = subprocess.PIPE,
) -> subprocess.CompletedProcess[bytes]:
    """``stdin`` is written to the CLI's standard input, unless ``stdin_fd`` is given
    (a terminal, say): then that is its standard input."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_"))}
    full_env.update(env or {})
    return subprocess.run(
        [*RLM_CMD, *args],
        stdin=stdin_fd,
        input=stdin if stdin_fd is None else None,
        stdout=subprocess.PIPE,
        stderr=stderr,
        env=full_env,
        cwd=cwd,
        timeout=60,
        check=False,
    )


@pytest.fixture
def needle(tmp_path: Path) -> Path:
    path = tmp_path / "needle.txt"
    path.write_text("filler. " * 300 + "The magic number is 4711. " + "more. " * 100)
    return path


# 1. --trace checked before the run --------------------------------------------------------


@pytest.mark.parametrize("trace", ["logs/", "logs", "-", "missing/run.jsonl"])
def test_a_bad_trace_path_is_refused_before_the_run(
    tmp_path: Path, needle: Path, trace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "logs").mkdir()
    monkeypatch.chdir(tmp_path)
    done = rlm_in_process("run", QUESTION, "--context-file", str(needle), "--provider",
                          "fixture", "--trace", trace)
    assert done.returncode == 2 and done.stdout == ""
    assert "Error: " in done.stderr and "Traceback" not in done.stderr
    assert "step 1" not in done.stderr  # the run never started
    assert not [p.name for p in tmp_path.rglob("*.part")]
    assert not (tmp_path / "-").exists()
    if trace == "missing/run.jsonl":
        assert "mkdir -p missing" in done.stderr


# 2. No traceback for an environment problem -----------------------------------------------


def test_doctor_with_too_few_file_descriptors_says_one_line() -> None:
    script = 'ulimit -n 16; exec "$@"'
    done = subprocess.run(["sh", "-c", script, "sh", *RLM_CMD, "doctor"],
                          capture_output=True, timeout=60, check=False)
    assert done.returncode == 1
    assert b"Traceback" not in done.stderr
    assert done.stderr.count(b"Error:") == 1 and b"cannot start a sandbox" in done.stderr
    debug = subprocess.run(["sh", "-c", script, "sh", *RLM_CMD, "doctor", "--debug"],
                           capture_output=True, timeout=60, check=False)
    assert debug.returncode == 1 and b"Traceback" in debug.stderr
    by_env = subprocess.run(["sh", "-c", script, "sh", *RLM_CMD, "doctor"],
                            env={**os.environ, "RLM_DEBUG": "1"},
                            capture_output=True, timeout=60, check=False)
    assert by_env.returncode == 1 and b"Traceback" in by_env.stderr


def test_run_with_too_few_file_descriptors_says_what_to_do(needle: Path) -> None:
    done = subprocess.run(["sh", "-c", 'ulimit -n 16; exec "$@"', "sh", *RLM_CMD, "run", QUESTION,
                           "--context-file", str(needle), "--provider", "fixture"],
                          capture_output=True, timeout=60, check=False)
    assert done.returncode == 1 and b"Traceback" not in done.stderr
    assert b"cannot start a sandbox: Too many open files" in done.stderr
    assert b"ulimit -n" in done.stderr and b"interrupted" not in done.stderr


# 3. A broken stderr never costs the answer ------------------------------------------------


@pytest.mark.parametrize("how", ["closed", "reader-gone", "reader-gone-quiet"])
def test_a_broken_stderr_keeps_the_answer(needle: Path, how: str) -> None:
    args = ["run", QUESTION, "--context-file", str(needle), "--provider", "fixture"]
    if how == "reader-gone-quiet":  # no progress printer: a warning is the first write
        (needle.parent / "blob.bin").write_bytes(b"\x00binary")  # "Warning: skipped 1 file"
        args = ["run", QUESTION, "--context-file", str(needle.parent), "--provider", "fixture",
                "-q"]
    if how == "closed":
        done = subprocess.run(["sh", "-c", 'exec "$@" 2>&-', "sh", *RLM_CMD, *args],
                              capture_output=True, timeout=60, check=False)
    else:
        read_end, write_end = os.pipe()
        os.close(read_end)
        done = cli(*args, stderr=write_end)
        os.close(write_end)
    assert done.returncode == 0 and done.stdout == b"4711\n"


# 4. acompletion under asyncio ---------------------------------------------------------------


def test_acompletion_under_asyncio_says_it_needs_trio() -> None:
    model = RLM(provider="fixture")
    with pytest.raises(UsageError, match=r"trio.*asyncio\.to_thread"):
        asyncio.run(model.acompletion(QUESTION, "The magic number is 5."))

    async def in_a_thread() -> str | None:
        result = await asyncio.to_thread(model.completion, QUESTION, "The magic number is 5.")
        return result.answer

    assert asyncio.run(in_a_thread()) == "5"


@pytest.mark.parametrize("entry", ["avolley", "iter_volley", "astream", "avolley_stream",
                                   "asession"])
def test_every_async_entry_under_asyncio_says_it_needs_trio(entry: str) -> None:
    model = RLM(provider="fixture")

    async def enter() -> None:
        if entry == "avolley":
            await model.avolley(["a"])
            return
        managers: dict[str, Callable[[], AbstractAsyncContextManager[object]]] = {
            "iter_volley": lambda: model.iter_volley(["a"]),
            "astream": lambda: model.astream(QUESTION, "The magic number is 5."),
            "avolley_stream": lambda: model.avolley_stream(["a"]),
            "asession": lambda: model.asession("The magic number is 5."),
        }
        async with managers[entry]():
            pass

    with pytest.raises(UsageError, match=rf"RLM\.{entry} runs under trio.*asyncio\.to_thread"):
        asyncio.run(enter())


# 5. An empty context is never silent --------------------------------------------------------


def test_an_empty_context_file_warns(tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    done = cli("run", QUESTION, "--context-file", str(empty), "--provider", "fixture", "-q")
    assert b"Warning: the context is empty" in done.stderr
    assert b"check that this is the input you meant" in done.stderr  # what to do, not only what


def test_data_on_stdin_without_the_flag_is_pointed_out() -> None:
    done = cli("run", QUESTION, "--provider", "fixture", "-q", stdin=b"The magic number is 9.")
    assert b"stdin has data" in done.stderr and b"--context-file -" in done.stderr
    nothing = cli("run", QUESTION, "--provider", "fixture", "-q", stdin=b"")
    assert b"no context given" in nothing.stderr


# 8. Several paths after one flag, and directories -------------------------------------------


def test_a_shell_glob_after_one_flag_makes_a_list(tmp_path: Path) -> None:
    for name in ("a.txt", "b.txt", "c.txt"):
        (tmp_path / name).write_text(f"The magic number is {name[0]}.")
    paths = sorted(str(p) for p in tmp_path.glob("*.txt"))
    done = cli("run", QUESTION, "--context-file", *paths, "--provider", "fixture", "--json")
    assert done.returncode == 0, done.stderr
    trace_free = json.loads(done.stdout)
    assert trace_free["status"] == "answered"
    unquoted = rlm_in_process("run", "what", "is", "it", "--context-file", paths[0],
                              "--provider", "fixture")
    assert unquoted.returncode == 2 and "Quote the whole query" in unquoted.stderr
    mistyped = rlm_in_process("run", QUESTION, "--context-file", paths[0], paths[0] + ".gone",
                              "--provider", "fixture")
    assert mistyped.returncode == 2
    assert f"{paths[0]}.gone (no such file, so not read as a context file)" in mistyped.stderr


def test_a_directory_is_one_document_per_matching_file(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "a.md").write_text("alpha")
    (docs / "sub" / "b.md").write_text("beta")
    (docs / "c.log").write_text("gamma")
    (docs / ".hidden.md").write_text("hidden")
    (docs / "blob.md").write_bytes(b"\x00\x01binary")
    assert read_context((str(docs),), "utf-8", "*.md") == ["alpha", "beta"]
    assert read_context((str(docs),), "utf-8") == ["alpha", "gamma", "beta"]
    with pytest.raises(UsageError, match=r"more than 2 files.*--glob"):
        read_context((str(docs),), "utf-8", max_files=2)


# 9. Providers: default endpoints, RLM_PROVIDER, missing keys --------------------------------


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, ["https://api.openai.com/v1", "RLM_API_KEY", "OPENAI_API_KEY"]),
        ({"RLM_PROVIDER": "anthropic"}, ["api.anthropic.com", "ANTHROPIC_API_KEY"]),
    ],
)
def test_a_model_name_alone_uses_the_vendor_endpoint_and_asks_for_a_key(
    needle: Path, env: dict[str, str], expected: list[str]
) -> None:
    done = rlm_in_process("run", QUESTION, "--context-file", str(needle), "--model", "gpt-4.1",
                          env=env)
    assert done.returncode == 4 and "no endpoint" not in done.stderr
    assert all(word in done.stderr for word in expected), done.stderr
    assert "step 1" not in done.stderr  # nothing was sent


def test_chat_without_a_model_names_the_flag(needle: Path) -> None:
    done = rlm_in_process("chat", "--context-file", str(needle), stdin="")
    assert done.returncode == 2
    assert "Error: no model: pass --model M (or set RLM_MODEL)" in done.stderr, done.stderr


def test_a_chat_question_a_limit_ended_says_which_flag_lifts_it(needle: Path) -> None:
    done = cli("chat", "--context-file", str(needle), "--provider", "fixture",
               "--max-llm-calls", "1", stdin=QUESTION.encode() + b"\n")
    assert done.returncode == 0, done.stderr
    assert b"status budget_exceeded: --max-llm-calls 1 reached" in done.stderr, done.stderr
    assert b"--max-llm-calls none lifts it" in done.stderr  # the CLI's spelling, on its thread


# 12. Output polish ------------------------------------------------------------------------------


def test_bare_rlm_prints_help_and_dash_v_prints_the_version() -> None:
    runner = CliRunner()
    bare = runner.invoke(main, [])
    assert bare.exit_code == 0 and "Usage:" in bare.output and "run" in bare.output
    group_alone = runner.invoke(main, ["config"])
    assert group_alone.exit_code == 0 and "show" in group_alone.stdout  # stdout, as bare rlm
    version = runner.invoke(main, ["-V"])
    assert version.exit_code == 0 and "version" in version.output



def test_volley_usage_names_the_command_people_type() -> None:
    runner = CliRunner()
    for args in (["volley", "--help"], ["volley", "--no-such-flag"]):
        usage = runner.invoke(main, args, prog_name="rlm").output
        assert "Usage: rlm volley [OPTIONS] [TASK]..." in usage, usage
        assert "volley run" not in usage
    work = runner.invoke(main, ["volley", "work", "--help"], prog_name="rlm").output
    assert "Usage: rlm volley work [OPTIONS]" in work


def test_volley_messages_are_not_hard_wrapped_on_a_redirected_stderr() -> None:
    done = rlm_in_process("volley", "hello", "--model", "gpt-4.1", "--base-url",
                          "http://127.0.0.1:1/v1", "--max-retries", "0", "--no-history",
                          env={"RLM_API_KEY": "k"})
    assert done.returncode == 1
    failed = [line for line in done.stderr.splitlines() if "cannot reach" in line]
    assert failed and all(line.endswith("--base-url right?)") for line in failed), done.stderr


@pytest.mark.parametrize(
    "args",
    [["run", "--json"], ["run", QUESTION, "--json", "--no-such-flag"],
     ["run", QUESTION, "--json", "--provider", "fixture", "--max-depth", "0"]],
)
def test_json_usage_errors_print_a_json_object_too(args: list[str]) -> None:
    done = rlm_in_process(*args)
    assert done.returncode == 2
    error = json.loads(done.stdout)
    assert error["status"] == "usage_error" and error["error"] and error["answer"] is None


def test_rlm_fixture_lists_every_generator() -> None:
    listed = CliRunner().invoke(main, ["fixture"])
    assert listed.exit_code == 0
    generators = [name.removeprefix("generate_") for name in fixture_names
                  if name.startswith("generate_")]
    assert sorted(generators) == ["multidoc", "needle", "oolong"]
    for name in generators:
        assert f"  {name} " in listed.output
        assert CliRunner().invoke(main, ["fixture", name, "--help"]).exit_code == 0


def test_multidoc_writes_a_directory_that_run_reads(tmp_path: Path) -> None:
    made = CliRunner().invoke(main, ["fixture", "multidoc", "--docs", "3", "--chars", "2000",
                                     "--output-dir", str(tmp_path / "docs")])
    assert made.exit_code == 0, made.output
    facts = json.loads((tmp_path / "docs" / ".facts.json").read_text())
    assert len(read_context((str(tmp_path / "docs"),), "utf-8")) == 3 == len(facts)


def test_multidoc_into_the_same_directory_again_leaves_only_the_new_set(tmp_path: Path) -> None:
    # --docs 8 then --docs 3 left doc-004 … doc-008 behind: `rlm run` read 8 documents while
    # the facts printed (and .facts.json) named 3.  A file of the user's own stays.
    docs = tmp_path / "docs"
    for count in ("8", "3"):
        made = CliRunner().invoke(main, ["fixture", "multidoc", "--docs", count, "--chars", "2000",
                                         "--output-dir", str(docs)])
        assert made.exit_code == 0, made.output
        (docs / "notes.txt").write_text("mine")
    assert sorted(p.name for p in docs.iterdir()) == [
        ".facts.json", "doc-001.txt", "doc-002.txt", "doc-003.txt", "notes.txt"]


def test_generated_files_are_readable_like_any_file_the_user_writes(tmp_path: Path) -> None:
    needle_file, docs = tmp_path / "needle.txt", tmp_path / "docs"
    for args in (["needle", "--chars", "2000", "--output", str(needle_file)],
                 ["multidoc", "--docs", "2", "--chars", "2000", "--output-dir", str(docs)]):
        assert CliRunner().invoke(main, ["fixture", *args]).exit_code == 0
    mask = os.umask(0o022)
    os.umask(mask)
    for path in (needle_file, docs / "doc-001.txt"):
        assert path.stat().st_mode & 0o777 == 0o666 & ~mask, path  # not mkstemp's 0600


def test_getting_started_documents_shell_completion() -> None:
    getting_started = README.parent / "docs" / "getting-started.md"
    assert "_RLM_COMPLETE=bash_source rlm" in getting_started.read_text()


@pytest.mark.parametrize(("words", "expected"),
                         [("rlm ru", "plain,run\nplain,runs"), ("rlm run q --pro", "--provider")])
def test_shell_completion_completes_command_names_and_flags(words: str, expected: str) -> None:
    env = {"_RLM_COMPLETE": "bash_complete", "COMP_WORDS": words,
           "COMP_CWORD": str(len(words.split()) - 1)}
    done = CliRunner(env=env).invoke(main, [], prog_name="rlm")
    assert done.exit_code == 0 and expected in done.stdout, done.output
    assert "Usage:" not in done.output and "Error" not in done.output


def test_stdin_on_a_terminal_says_it_is_waiting_for_input() -> None:
    master, slave = pty.openpty()
    os.write(master, b"\x04")  # Ctrl-D, queued: the read ends at once with nothing read
    try:
        done = cli("run", QUESTION, "--context-file", "-", "--provider", "fixture", "-q",
                   stdin=None, stdin_fd=slave)
    finally:
        os.close(slave)
        os.close(master)
    assert b"reading the context file from stdin (this terminal)" in done.stderr
    assert b"Ctrl-D" in done.stderr and b"Warning: the context is empty" in done.stderr
