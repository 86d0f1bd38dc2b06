"""`rlm volley` as someone new to it meets it: the help, task files, a volley just created.

In-process CLI runs on the built-in fixture provider and a SQLite journal in a
temporary directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from rlm.cli import main
from rlm.volley.tasks import parse_task_file
from tests.helpers import rlm_in_process


def test_volley_help_lists_the_journal_subcommands() -> None:
    shown = CliRunner().invoke(main, ["volley", "--help"], prog_name="rlm").output
    for command in (
        "rlm volley create",
        "rlm volley work ID [--pool N]",
        "rlm volley list",
        "rlm volley show ID|last",
    ):
        assert f"\n    {command}" in shown, shown
    # The docstring's own paragraphs keep their two-space indent beside them.
    assert "\n  Every volley is recorded in a journal" in shown, shown


def test_a_json_list_of_tasks_is_tasks() -> None:
    parsed = parse_task_file('["What is x?", {"prompt": "And y?", "timeout": "5s"}]', "t.json")
    assert parsed.tasks == [{"prompt": "What is x?"}, {"prompt": "And y?", "timeout": "5s"}]


@pytest.mark.parametrize(
    ("name", "text", "said"),
    [
        # Read as text these were one paid task each, "[1,2" and "tasks: a".
        ("t.json", "[1,2\n", "t.json is not valid JSON (Expecting ',' delimiter, line 2"),
        ("t.json", "tasks: a\n", "t.json is not JSON: a .json task file holds"),
        ("t.jsonl", "a\nb\n", "t.jsonl is not JSON: a .json task file holds"),
        # Valid JSON, but one value: "is not JSON" was wrong about it.
        ("t.json", '"What is x?"\n', "t.json holds a JSON string, not tasks: a .json task"),
        ("t.json", "42", "t.json holds a JSON number, not tasks"),
        ("t.jsonl", "null\n", "t.jsonl holds a JSON null, not tasks"),
        ("t.json", "{}", "t.json, line 1: a task object needs a 'prompt' string"),
        ("t.jsonl", '{"prompt": "a"}\n{"timeout": 5}\n', "t.jsonl, line 2: a task object needs"),
    ],
)
def test_a_task_file_that_is_not_what_its_name_says_is_an_error(
    name: str, text: str, said: str
) -> None:
    from rlm.errors import UsageError

    with pytest.raises(UsageError) as raised:
        parse_task_file(text, name)
    assert str(raised.value).startswith(said), raised.value


def test_text_that_starts_like_json_is_still_text() -> None:
    parsed = parse_task_file("[INFO] summarise the log\nand the warnings\n", "t.txt")
    assert [t["prompt"] for t in parsed.tasks] == ["[INFO] summarise the log", "and the warnings"]


def test_an_empty_task_file_is_named(tmp_path: Path) -> None:
    empty = tmp_path / "tasks.txt"
    empty.write_text("\n  \n")
    for verb in (["volley"], ["volley", "create"]):
        done = rlm_in_process(
            *verb,
            "-f",
            str(empty),
            "--provider",
            "fixture",
            env={"RLM_JOURNAL": str(tmp_path / "j.sqlite3")},
        )
        assert done.returncode == 2
        assert done.stderr.startswith(f"Error: task file {empty} holds no tasks"), done.stderr
    # With tasks given besides, an empty file is no mistake.
    done = rlm_in_process(
        "volley",
        "create",
        "a",
        "-f",
        str(empty),
        "--provider",
        "fixture",
        env={"RLM_JOURNAL": str(tmp_path / "j.sqlite3")},
    )
    assert done.returncode == 0, done.stderr


def test_show_of_a_volley_nobody_worked_on_says_created_not_interrupted(tmp_path: Path) -> None:
    journal = str(tmp_path / "j.sqlite3")
    created = rlm_in_process(
        "volley", "create", "a", "b", "--provider", "fixture", "--journal", journal
    )
    volley_id = created.stdout.strip()
    text = rlm_in_process("volley", "show", volley_id, "--journal", journal)
    assert text.returncode == 0
    assert text.stdout.splitlines()[0] == f"=== volley {volley_id}: created ==="
    assert f"not started yet: `rlm volley work {volley_id}` runs it" in text.stdout
    # Its tasks are still to run, not "2 cancelled".
    assert text.stdout.splitlines()[1] == "tasks: 0 succeeded, 0 failed, 2 open of 2 in 0ms"
    assert rlm_in_process("volley", "work", volley_id, "--journal", journal, "-q").returncode == 0
    shown = rlm_in_process(
        "volley", "show", volley_id, "--journal", journal, "--output-format", "json"
    )
    assert json.loads(shown.stdout)["status"] == "succeeded"


def test_flags_after_a_double_dash_are_named_as_tasks(tmp_path: Path) -> None:
    # `--` ends the flags: what follows is tasks, so the error must not just say
    # "use --provider fixture" to someone who typed it after `--`.
    rlm_bin = str(Path(sys.executable).with_name("rlm"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_"))}
    for verb in (["volley"], ["volley", "create"]):
        done = subprocess.run(
            [rlm_bin, *verb, "--journal", str(tmp_path / "j.sqlite3"), "--", "list",
             "--provider", "fixture"],
            env=env, capture_output=True, text=True, timeout=60, check=False,
        )
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("Error: no model"), done.stderr
        assert "--provider came after `--`, so it was taken as one of the tasks" in done.stderr
        assert "Traceback" not in done.stderr


def test_max_concurrent_zero_is_a_usage_error_not_the_default(tmp_path: Path) -> None:
    # `--max-concurrent 0` used to run at the default of 16, as if it had not been given.
    journal = {"RLM_JOURNAL": str(tmp_path / "j.sqlite3")}
    done = rlm_in_process("volley", "a", "--provider", "fixture", "--max-concurrent", "0",
                          env=journal)
    assert done.returncode == 2
    assert done.stderr == "Error: --max-concurrent must be a positive integer, got 0\n"
    assert rlm_in_process("volley", "list", env=journal).stdout == ""  # nothing was stored


def test_one_task_is_one_task_in_the_estimate_and_the_list(tmp_path: Path) -> None:
    journal = {"RLM_JOURNAL": str(tmp_path / "j.sqlite3")}
    done = rlm_in_process("volley", "a", "--provider", "fixture", "--estimate", env=journal)
    assert done.stdout.startswith("estimate: 1 task\n"), done.stdout
    assert rlm_in_process("volley", "create", "a", "--provider", "fixture", env=journal).stdout
    listed = rlm_in_process("volley", "list", env=journal).stdout
    assert " 1 task: 0 done, 0 failed, 1 open " in listed, listed


def test_tasks_that_are_not_utf8_are_a_usage_error_and_encoding_reads_them(tmp_path: Path) -> None:
    # --stdin used to end in "Error: UnicodeEncodeError ..." (exit 1) with the volley half
    # stored, and -f named --encoding, which did not apply to task files.
    journal = {"RLM_JOURNAL": str(tmp_path / "j.sqlite3")}
    latin = "Qu'est-ce que le nombre magique, café ?\n".encode("latin-1")
    (tmp_path / "tasks.txt").write_bytes(latin)
    for source, stdin in ((["--stdin"], latin), (["-f", str(tmp_path / "tasks.txt")], None)):
        done = rlm_in_process("volley", *source, "--provider", "fixture", "-q", env=journal,
                              stdin=stdin)
        assert done.returncode == 2, done.stderr
        assert "is not valid utf-8 (byte 0xe9 at offset 36); pass the file's encoding, " \
               "e.g. --encoding latin-1" in done.stderr, done.stderr
        assert rlm_in_process("volley", "list", env=journal).stdout == ""  # nothing stored
    for source, stdin in ((["--stdin"], latin), (["-f", str(tmp_path / "tasks.txt")], None)):
        done = rlm_in_process("volley", *source, "--provider", "fixture", "-q",
                              "--encoding", "latin-1", env=journal, stdin=stdin)
        assert done.returncode == 0, done.stderr
        assert "=== [1/1] ✓ Qu'est-ce que le nombre magique, café ? ===" in done.stdout


def test_a_task_files_max_concurrent_has_the_flags_bound(tmp_path: Path) -> None:
    # A shared task file's "max_concurrent": 100000 started 100,000 coroutines for one
    # task, as --max-concurrent 100000 did: refused alike, before anything is stored.
    tasks = tmp_path / "t.json"
    tasks.write_text('{"max_concurrent": 100000, "tasks": ["What is x?"]}')
    journal = tmp_path / "j.sqlite3"
    done = rlm_in_process("volley", "-f", str(tasks), "--provider", "fixture", "-y",
                          "--journal", str(journal))
    assert done.returncode == 2, done.stderr
    # Named as the key in the file it came from: no --max-concurrent was given.
    assert done.stderr == (f'Error: "max_concurrent" in {tasks} must be at most 4,096, '
                           "got 100,000\n")
    assert not journal.exists()  # nothing stored, not even an empty journal
