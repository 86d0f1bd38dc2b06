"""Scorers in process: each built-in on right, wrong and awkward outputs; a user's own."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rlm.errors import UsageError
from rlm.eval.scorers import make_scorer, normalise, number_in, score_output, set_f1


def score(spec: str, output: str, *answers: str | tuple[str, ...]) -> float | None:
    return score_output(make_scorer(spec), output, answers, {"id": "x"}).value


def test_normalising_sets_aside_case_punctuation_articles_and_spacing() -> None:
    assert normalise("  The  Eiffel-Tower! ") == "eiffel tower"
    assert normalise("ＡＢＣ") == "abc"  # full-width forms are the same letters


@pytest.mark.parametrize(("spec", "output", "answer", "expected"), [
    ("exact", "The answer is Paris.", "Paris", 0.0),
    ("exact", " paris. ", "Paris", 1.0),
    ("contains", "The answer is Paris.", "Paris", 1.0),
    ("contains", "Parisian food", "Paris", 0.0),  # whole words only
    ("numeric", "It is 1,234.", "1234", 1.0),
    ("numeric", "In 2023 there were 41.", "42", 0.0),
    ("numeric:1", "In 2023 there were 41.", "42", 1.0),
    ("numeric:1%", "99.5", "100", 1.0),
    ("numeric:1%", "98", "100", 0.0),
    ("numeric", "no number here", "7", 0.0),
    ("regex", "code BC0417 found", r"BC\d{4}", 1.0),
    ("regex", "nothing", r"BC\d{4}", 0.0),
])
def test_each_built_in_scorer(spec: str, output: str, answer: str, expected: float) -> None:
    assert score(spec, output, answer) == expected


def test_the_best_of_several_accepted_answers_counts() -> None:
    assert score("exact", "NYC", "New York", "NYC") == 1.0


def test_set_f1_scores_list_answers_whatever_their_order_and_form() -> None:
    assert set_f1("y, x, z", ("x", "y", "z")) == 1.0
    assert set_f1('["X", "y"]', ("x", "y", "z")) == pytest.approx(0.8)
    assert set_f1("- x\n- w", ("x", "y")) == pytest.approx(0.5)
    assert set_f1("nothing", ("x",)) == 0.0
    assert score("set_f1", "1. x\n2. y", ("x", "y")) == 1.0


def test_a_scorer_error_marks_the_item_not_the_run() -> None:
    result = score_output(make_scorer("regex"), "text", ("([unclosed",), {})
    assert result.value is None and result.error is not None
    assert "not a regular expression" in result.error
    numeric = score_output(make_scorer("numeric"), "7", ("seven",), {})
    assert numeric.value is None and "holds no number" in (numeric.error or "")


def test_an_answer_the_scorer_cannot_read_does_not_spoil_one_it_can() -> None:
    assert score("numeric", "12", "twelve", "12") == 1.0
    assert score("numeric", "13", "twelve", "12") == 0.0
    assert score("regex", "BC0417", "([unclosed", r"BC\d{4}") == 1.0


def test_unknown_scorers_are_usage_errors_before_anything_runs() -> None:
    for spec in ("exactly", "exact:x", "numeric:lots", "judge:x"):
        with pytest.raises(UsageError):
            make_scorer(spec)


def test_a_users_own_scorer_is_called_with_the_output_and_the_item(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_scoring.py").write_text(
        "def starts(output, item):\n"
        "    return output.startswith(item['answer'])\n"
        "def half(output, item):\n"
        "    return 0.5\n"
        "def broken(output, item):\n"
        "    raise KeyError('nope')\n"
        "def wrong_kind(output, item):\n"
        "    return 'yes'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_scoring", raising=False)
    item = {"id": "q", "answer": "42", "answers": ["42"]}
    assert score_output(make_scorer("my_scoring:starts"), "42!", ("42",), item).value == 1.0
    assert score_output(make_scorer("my_scoring:half"), "x", ("42",), item).value == 0.5
    broken = score_output(make_scorer("my_scoring:broken"), "x", ("42",), item)
    assert broken.value is None and "KeyError" in (broken.error or "")
    wrong = score_output(make_scorer("my_scoring:wrong_kind"), "x", ("42",), item)
    assert wrong.value is None and "True/False or a number" in (wrong.error or "")
    with pytest.raises(UsageError, match="--scorer"):
        make_scorer("my_scoring:absent")


def test_number_in_reads_the_last_number() -> None:
    assert number_in("between 3 and 4.5") == 4.5
    assert number_in("-1e3") == -1000.0
    assert number_in("none") is None
