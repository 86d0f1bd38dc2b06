"""Reading volley tasks and durations; the records round-trip through JSON."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from rlm._durations import format_duration, parse_duration
from rlm.cli import main
from rlm.errors import UsageError
from rlm.volley import TaskResult, VolleySummary, VolleyTask, number_tasks
from rlm.volley.tasks import parse_task_file


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0.5", 0.5), ("2s", 2.0), ("500ms", 0.5), ("5m", 300.0), ("2h", 7200.0), (3, 3.0)],
)
def test_durations_accept_seconds_and_units(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["", "5x", "-1", "0", "1.5.2", "m"])
def test_bad_durations_say_what_is_expected(bad: str) -> None:
    with pytest.raises(UsageError, match=r"--timeout must be a (positive )?duration"):
        parse_duration(bad, "--timeout")


def test_durations_print_short() -> None:
    assert [format_duration(s) for s in (0.25, 2.5, 90, 3600)] == ["250ms", "2.5s", "1m30s", "1h"]


def test_a_text_file_is_one_task_per_line_and_blank_lines_are_skipped() -> None:
    parsed = parse_task_file("update auth.go\n\n  \nsummarise doc 17\n", "tasks.txt")
    assert [t.prompt for t in number_tasks(parsed.tasks)] == ["update auth.go", "summarise doc 17"]


def test_a_hash_line_in_a_task_file_is_a_comment_not_a_task() -> None:
    text = "# questions for the audit\nwho signed?\n  # later: dates\nwhen?\n"
    parsed = parse_task_file(text, "tasks.txt")
    assert [t.prompt for t in number_tasks(parsed.tasks)] == ["who signed?", "when?"]
    jsonl = '# header\n{"prompt": "#1 first"}\n# between\n{"prompt": "b"}\n'
    parsed = parse_task_file(jsonl, "t.jsonl")  # a task that starts with # is written as JSONL
    assert [t.prompt for t in number_tasks(parsed.tasks)] == ["#1 first", "b"]


def test_volley_help_names_the_keys_a_task_object_may_carry() -> None:
    help_text = " ".join(CliRunner().invoke(main, ["volley", "--help"]).output.split())
    for key in ("prompt", "timeout", "model", "max_tokens", "# is a comment"):
        assert key in help_text


def test_the_json_form_carries_context_cap_and_per_task_settings() -> None:
    text = json.dumps({
        "context": ["doc a", "doc b"],
        "max_concurrent": 4,
        "tasks": ["plain", {"prompt": "p2", "timeout": "5m", "model": "m2", "max_tokens": 50}],
    })
    parsed = parse_task_file(text, "t.json")
    assert parsed.context == ["doc a", "doc b"] and parsed.max_concurrent == 4
    tasks = number_tasks(parsed.tasks)
    assert tasks == [
        VolleyTask(1, "plain"),
        VolleyTask(2, "p2", timeout=300.0, model="m2", max_tokens=50),
    ]


def test_jsonl_is_one_task_object_per_line() -> None:
    parsed = parse_task_file('{"prompt": "a"}\n\n{"prompt": "b", "timeout": 2}\n', "t.jsonl")
    assert [(t.prompt, t.timeout) for t in number_tasks(parsed.tasks)] == [("a", None), ("b", 2.0)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"prompt": "a"}\n{oops\n', "t.jsonl, line 2 is not valid JSON"),
        ('{"prompt": "a", "colour": "red"}\n{"prompt": "b"}', "unknown key"),
        ('{"tasks": "nope"}', "'tasks' must be a list"),
        ('{"tasks": ["a"], "max_concurrent": 0}', "'max_concurrent' must be a positive"),
        ('{"tasks": [{"prompt": "a", "max_tokens": -1}]}', "'max_tokens' must be a positive"),
        ('{"tasks": [{"prompt": "a", "timeout": "soon"}]}', "task 1: 'timeout'"),
    ],
)
def test_bad_task_files_name_the_place_and_the_fix(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parsed = parse_task_file(text, "t.jsonl")
        number_tasks(parsed.tasks)


def test_an_empty_task_list_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="no tasks"):
        number_tasks(["", "   "])


def test_records_round_trip_through_json() -> None:
    task = VolleyTask(3, "p", timeout=2.0, model="m", max_tokens=9)
    assert VolleyTask.from_dict(json.loads(json.dumps(task.to_dict()))) == task
    result = TaskResult(3, "p", "failed", 1.5, 10, 2, 4, None, 1, None, "boom", request_sec=1.25)
    assert TaskResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result
    assert result.to_dict()["tokens_total"] == 12 and result.to_dict()["request_sec"] == 1.25
    with pytest.raises(ValueError, match="unknown task status"):
        TaskResult.from_dict({**result.to_dict(), "status": "weird"})


def test_the_json_summary_carries_total_and_average_tokens() -> None:
    summary = VolleySummary(total_tasks=4, succeeded=2, failed=1, cancelled=1, duration_sec=1.0,
                            tokens_input=1000, tokens_output=500, tokens_cached=0,
                            total_cost=0.0, max_concurrent_used=2, total_retries=0,
                            rate_limited=0)
    data = summary.to_dict()
    assert (data["total_tokens"], data["avg_tokens_per_task"]) == (1500, 500.0)  # per verdict


def test_a_task_file_nested_thousands_deep_is_a_usage_error() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(UsageError, match=r"deep.json holds JSON nested too deeply to be tasks"):
        parse_task_file(deep, "deep.json")
