"""The durable volley from Python: RLM(...).volley(..., journal=...), resume_volley,
work_volley (a real SQLite journal, the in-process fixture model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlm import RLM, JournalError, ProviderError
from rlm.journal import open_store
from rlm.testing.provider import FunctionProvider

CONTEXT = "filler. " * 500 + "The magic number is 4242. " + "more. " * 100
QUESTIONS = ["What is the magic number?", "Summarise the text", "What is the colour?"]


def test_a_journaled_volley_is_recorded_and_its_results_committed(tmp_path: Path) -> None:
    journal = str(tmp_path / "v.sqlite3")
    result = RLM(provider="fixture").volley(QUESTIONS, CONTEXT, journal=journal)
    assert result.status == "succeeded"
    assert result.tasks[0].output == "4242"
    store = open_store(journal)
    try:
        [row] = store.volleys()
        assert row.volley_id == result.volley_id and row.counts["done"] == 3
    finally:
        store.close()


def test_resume_runs_only_what_is_left_and_never_pays_again(tmp_path: Path) -> None:
    journal = str(tmp_path / "v.sqlite3")
    first = RLM(provider="fixture").volley(QUESTIONS, CONTEXT, journal=journal)
    counting = FunctionProvider.scripted(["unused"])
    again = RLM(provider="fixture", providers=counting).resume_volley("last", journal=journal)
    assert again.volley_id == first.volley_id and again.status == "succeeded"
    assert [t.output for t in again.tasks] == [t.output for t in first.tasks]
    assert counting.requests == []  # every task was done: nothing is sent again


def test_a_resume_runs_the_failed_tasks_again_unless_skipped(tmp_path: Path) -> None:
    journal = str(tmp_path / "v.sqlite3")
    failing = FunctionProvider.scripted(
        lambda r: "ok", sub=lambda r: "ok",
        fail=lambda r: ProviderError("boom") if "colour" in str(r.messages) else None)
    first = RLM(providers=failing).volley(QUESTIONS, CONTEXT, journal=journal)
    assert [t.status for t in first.tasks] == ["succeeded", "succeeded", "failed"]
    fixed = FunctionProvider.scripted(lambda r: "ok", sub=lambda r: "ok")
    kept = RLM(providers=fixed).resume_volley("last", journal=journal, skip_failed=True)
    assert kept.tasks[2].status == "failed" and fixed.requests == []
    again = RLM(providers=fixed).resume_volley("last", journal=journal)
    assert [t.status for t in again.tasks] == ["succeeded"] * 3
    assert len(fixed.requests) == 1  # only the failed task was sent


def test_work_volley_on_a_journal_that_is_not_there_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(JournalError, match="no journal at"):
        RLM(provider="fixture").work_volley("last", journal=str(tmp_path / "missing.sqlite3"))
