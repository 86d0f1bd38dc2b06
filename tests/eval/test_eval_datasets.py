"""Datasets: JSONL files (every way to give a context and answers, every mistake named)
and the built-in generators (sizes, seeds, answers that are really in the context)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rlm.errors import UsageError
from rlm.eval.datasets import load_dataset, read_jsonl
from rlm.eval.items import parse_tiers, tier_label, tier_of

TIERS = (2_000, 20_000)


def write(path: Path, *items: object) -> Path:
    path.write_text("\n".join(json.dumps(i) for i in items) + "\n", encoding="utf-8")
    return path


def test_tiers_are_written_as_people_write_them() -> None:
    assert parse_tiers("20k, 2k,1M,1.5M") == (2_000, 20_000, 1_000_000, 1_500_000)
    assert [tier_label(t) for t in (2_000, 1_500_000, 999)] == ["2k", "1.5M", "999"]
    assert tier_of(2_001, TIERS) == "20k" and tier_of(30_000, TIERS) == ">20k"
    for bad in ("", "2x", "10", "1G"):
        with pytest.raises(ValueError):
            parse_tiers(bad)


def test_a_jsonl_dataset_gives_its_items(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x" * 3_000, encoding="utf-8")
    (tmp_path / "b.txt").write_text("the code is 7", encoding="utf-8")
    path = write(tmp_path / "data.jsonl",
                 {"id": "one", "question": "Q1?", "context": "short", "answer": 42},
                 {"question": "Q2?", "context_path": ["a.txt", "b.txt"], "answers": ["7", "seven"]},
                 {"id": 3, "question": "Q3?", "context": ["d1", "d2"], "answer": ["a", "b"],
                  "scorer": "set_f1"})
    items = read_jsonl(path, tiers=TIERS, max_context_bytes=1 << 20)
    assert [i.id for i in items] == ["one", "2", "3"]
    assert items[0].answers == ("42",) and items[0].tier == "2k"
    assert items[1].context == ("x" * 3_000, "the code is 7") and items[1].tier == "20k"
    assert items[1].answers == ("7", "seven")
    assert items[2].answers == (("a", "b"),) and items[2].scorer == "set_f1"
    assert items[2].record()["answers"] == [["a", "b"]]


@pytest.mark.parametrize(("line", "says"), [
    ({"question": "Q?"}, "give 'answer'"),
    ({"question": "Q?", "answer": "a", "answers": ["a"]}, "give 'answer'"),
    ({"context": "c", "answer": "a"}, "'question'"),
    ({"question": "Q?", "answer": "a", "extra": 1}, "unknown key(s) extra"),
    ({"question": "Q?", "answer": {"a": 1}}, "'answer' must hold"),
    ({"question": "Q?", "answer": "a", "context_path": "missing.txt"},
     "missing.txt does not exist"),
    ({"question": "Q?", "answer": "a", "context": "x", "context_path": "y"}, "not both"),
    ({"question": "Q?", "answer": "a", "context": "x" * 2_000}, "--max-context-bytes"),
])
def test_every_mistake_names_the_file_and_line(tmp_path: Path, line: object, says: str) -> None:
    path = write(tmp_path / "d.jsonl", {"question": "ok?", "answer": "a"}, line)
    with pytest.raises(UsageError, match="line 2") as caught:
        read_jsonl(path, tiers=TIERS, max_context_bytes=1_000)
    assert says in str(caught.value)


def test_a_pipe_or_a_device_is_refused_not_waited_on(tmp_path: Path) -> None:
    # A named pipe with no writer would block the read for ever; /dev/zero never ends.
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(UsageError, match=r"dataset .*pipe is not a regular file \(a named pipe"):
        read_jsonl(tmp_path / "pipe", tiers=TIERS, max_context_bytes=1_000)
    for name in ("pipe", "/dev/zero"):
        path = write(tmp_path / "d.jsonl", {"question": "Q?", "answer": "a", "context_path": name})
        with pytest.raises(UsageError, match=r"line 1: context file .* is not a regular file"):
            read_jsonl(path, tiers=TIERS, max_context_bytes=1_000)


def test_duplicate_ids_empty_files_and_bad_json_are_refused(tmp_path: Path) -> None:
    dup = write(tmp_path / "dup.jsonl", {"id": "a", "question": "Q?", "answer": "1"},
                {"id": "a", "question": "Q?", "answer": "1"})
    with pytest.raises(UsageError, match="used twice"):
        read_jsonl(dup, tiers=TIERS, max_context_bytes=1_000)
    (tmp_path / "empty.jsonl").write_text("\n\n", encoding="utf-8")
    with pytest.raises(UsageError, match="holds no items"):
        read_jsonl(tmp_path / "empty.jsonl", tiers=TIERS, max_context_bytes=1_000)
    (tmp_path / "bad.jsonl").write_text('{"question": \n', encoding="utf-8")
    with pytest.raises(UsageError, match="line 1 is not a JSON object"):
        read_jsonl(tmp_path / "bad.jsonl", tiers=TIERS, max_context_bytes=1_000)
    with pytest.raises(UsageError, match="built-in generators"):
        load_dataset("nope", tiers=TIERS, per_tier=1, seed=0, max_context_bytes=1_000)


@pytest.mark.parametrize("name", ["needle", "oolong", "multidoc"])
def test_generators_make_items_at_each_tier_the_same_for_a_seed(name: str) -> None:
    items = load_dataset(name, tiers=TIERS, per_tier=3, seed=5, max_context_bytes=1)
    again = load_dataset(name, tiers=TIERS, per_tier=3, seed=5, max_context_bytes=1)
    other = load_dataset(name, tiers=TIERS, per_tier=3, seed=6, max_context_bytes=1)
    assert items == again and items != other
    assert [i.tier for i in items] == ["2k"] * 3 + ["20k"] * 3
    assert len({i.id for i in items}) == 6
    for item in items:
        size = int(item.tier.removesuffix("k")) * 1_000
        assert 0.5 * size <= item.context_chars <= 1.5 * size, (item.id, item.context_chars)


def test_generated_answers_are_in_their_contexts() -> None:
    for item in load_dataset("needle", tiers=TIERS, per_tier=4, seed=1, max_context_bytes=1):
        assert f"The magic number is {item.answers[0]}." in item.context[0]
    for item in load_dataset("multidoc", tiers=TIERS, per_tier=4, seed=1, max_context_bytes=1):
        key = item.question.removeprefix("What is the ").removesuffix("?")
        holders = [d for d in item.context if f"The {key} is " in d]
        assert len(holders) == 1 and f"The {key} is {item.answers[0]}." in holders[0]
