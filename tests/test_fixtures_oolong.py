"""OOLONG-style fixtures: labels derivable from text, exact answers checked by brute force."""

from __future__ import annotations

from collections import Counter

import pytest

from rlm.fixtures.oolong import LABELS, MONTHS, generate_oolong, label_of, parse_records


def _brute_force(text: str, question: str, kind: str) -> set[str]:
    """Every answer the text supports, recomputed from the text alone (ties give several)."""
    rows = [(date, user, label_of(instance)) for date, user, instance in parse_records(text)]
    if kind in ("most_common_label", "least_common_label"):
        counts = Counter(label for _, _, label in rows)
        values = {label: counts[label] for label in LABELS}
        best = max(values.values()) if kind == "most_common_label" else min(values.values())
        return {label for label, n in values.items() if n == best}
    if kind == "user_label_count":
        words = question.rstrip("?").split()
        user, label = int(words[words.index("user") + 1]), words[-1]
        return {str(sum(1 for _, u, lab in rows if u == user and lab == label))}
    assert kind == "month_most_label"
    label = question.split("label ")[1].split()[0]
    by_month = Counter(MONTHS[date.month - 1] for date, _, lab in rows if lab == label)
    top = max(by_month.values())
    return {month for month, n in by_month.items() if n == top}


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("records", [1, 7, 40, 300])
def test_every_answer_is_the_unique_brute_force_answer(records: int, seed: int) -> None:
    fixture = generate_oolong(records, seed=seed, users=6)
    for q in fixture.questions:
        assert _brute_force(fixture.text, q.text, q.kind) == {q.answer}, q


def test_labels_are_derivable_from_the_instance_text() -> None:
    fixture = generate_oolong(500, seed=3)
    assert all(label_of(rec.instance) == rec.label for rec in fixture.records)
    assert {rec.label for rec in fixture.records} == set(LABELS)
    with pytest.raises(ValueError):
        label_of("Tell me a story.")


def test_record_format_and_order() -> None:
    fixture = generate_oolong(100, seed=2)
    lines = fixture.text.splitlines()
    assert len(lines) == 100
    assert all(line.count(" || ") == 2 and line.startswith("Date: 2023-") for line in lines)
    dates = [rec.date for rec in fixture.records]
    assert dates == sorted(dates)


def test_users_are_skewed() -> None:
    fixture = generate_oolong(3000, seed=1, users=20)
    counts = Counter(rec.user for rec in fixture.records).most_common()
    assert counts[0][1] > 4 * counts[-1][1]


def test_all_question_kinds_are_asked_on_a_large_instance() -> None:
    fixture = generate_oolong(2000, seed=1)
    kinds = Counter(q.kind for q in fixture.questions)
    assert set(kinds) == {
        "most_common_label", "least_common_label", "user_label_count", "month_most_label"
    }


def test_deterministic_and_bad_arguments() -> None:
    assert generate_oolong(50, seed=9) == generate_oolong(50, seed=9)
    assert generate_oolong(50, seed=9).text != generate_oolong(50, seed=10).text
    with pytest.raises(ValueError):
        generate_oolong(0)
