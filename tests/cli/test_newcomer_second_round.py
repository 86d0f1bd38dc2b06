"""A newcomer's first hour, second round (issue 31): the noise around good output.

Each test failed before its fix: lane lines after every run, a typo with no suggestion,
a box drawn on a pipe, symbols a C locale cannot show, token counts as ``1854.0k``,
`rlm run` advertising arguments it refuses and taking no ``--context TEXT``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rlm._sizes import format_count as _tokens
from rlm._symbols import utf8_locale
from tests.helpers import rlm_in_process

NEEDLE = "filler. " * 300 + "The magic number is 6174. " + "more. " * 50
RLM_CMD = [sys.executable, "-m", "rlm"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_"))}
    env.update(extra)
    return env


def test_lane_lines_come_only_with_verbose(tmp_path: Path) -> None:
    context = tmp_path / "c.txt"
    context.write_text(NEEDLE)
    args = ["run", "What is the magic number?", "--context-file", str(context),
            "--provider", "fixture"]
    plain = rlm_in_process(*args)
    assert plain.returncode == 0 and plain.stdout == "6174\n"
    assert "lane:" not in plain.stderr
    verbose = rlm_in_process(*args, "-v")
    assert "sub lane:" in verbose.stderr and "capacity now" not in verbose.stderr


def test_a_mistyped_command_gets_a_suggestion() -> None:
    done = rlm_in_process("volly")
    assert done.returncode == 2
    assert "No such command 'volly'. Did you mean 'volley'?" in done.stderr


def test_runs_on_a_pipe_are_tab_separated_columns_without_a_box(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    context = tmp_path / "c.txt"
    context.write_text(NEEDLE)
    ran = rlm_in_process("run", "What is the magic number?", "--context-file", str(context),
                         "--provider", "fixture", "-q", env=env)
    assert ran.returncode == 0
    listed = rlm_in_process("runs", env=env)
    lines = listed.stdout.splitlines()
    assert lines[0].split("\t") == ["id", "when", "status", "LLM calls", "cost", "duration",
                                    "query"]
    assert len(lines) == 2 and lines[1].split("\t")[2] == "answered"
    assert not any(ch in listed.stdout for ch in "│─┃━┏┓")


def test_a_c_locale_gets_ascii_symbols(tmp_path: Path) -> None:
    assert not utf8_locale({"LANG": "C"}) and not utf8_locale({"LC_ALL": "POSIX"})
    assert utf8_locale({"LANG": "en_US.UTF-8"}) and utf8_locale({})
    assert utf8_locale({"LC_ALL": "C.UTF-8", "LANG": "C"})
    context = tmp_path / "c.txt"
    context.write_text(NEEDLE)
    args = [*RLM_CMD, "volley", "What is the magic number?", "Summarise it",
            "--context-file", str(context), "--provider", "fixture",
            "--journal", str(tmp_path / "j.sqlite3")]
    done = subprocess.run(args, capture_output=True, timeout=60, check=False,
                          env=_env(LANG="C", LC_ALL="C"))
    assert done.returncode == 0, done.stderr
    assert b"=== [1/2] ok What is the magic number? ===" in done.stdout
    assert done.stderr.isascii(), done.stderr
    unicode = subprocess.run(args, capture_output=True, timeout=60, check=False,
                             env=_env(LANG="C.UTF-8", LC_ALL="C.UTF-8"))
    assert "=== [1/2] ✓ What is the magic number? ===".encode() in unicode.stdout


def test_token_counts_read_as_numbers() -> None:
    assert [_tokens(n) for n in (950, 3_900, 412_000, 1_854_000, 999_999)] == [
        "950", "3.9k", "412k", "1.85M", "1M"]


def test_run_takes_context_text_and_its_usage_names_only_what_it_takes() -> None:
    done = rlm_in_process("run", "What is the magic number?", "--context",
                          "the magic number is 77", "--provider", "fixture", "-q")
    assert done.returncode == 0 and done.stdout == "77\n"
    usage = rlm_in_process("run", "--help").stdout.splitlines()[0]
    assert usage.endswith(" run [OPTIONS] QUERY")


def test_the_readme_activates_before_bare_rlm_and_links_nothing_users_lack() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    first_bare = readme.index("\nrlm ")
    assert ". .venv/bin/activate" in readme[:first_bare]
    assert "DESIGN.md" not in readme and "../shared" not in readme


def test_the_suite_never_touches_the_users_state_or_config() -> None:
    from platformdirs import user_state_dir

    from rlm._profiles import user_config_file

    state = os.environ["XDG_STATE_HOME"]
    assert "rlm-tests-state-" in state
    assert user_state_dir("rlm").startswith(state)
    assert str(user_config_file()).startswith(state)
