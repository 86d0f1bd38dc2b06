"""Multi-document fixtures: known facts, findable by the fixture sub-model."""

from __future__ import annotations

import pytest

from rlm.fixtures.multidoc import FACT_KEYS, generate_multidoc
from rlm.fixtures.needle import SENTENCE_COUNT, filler_sentence
from rlm.providers.fixture import sub_reply


@pytest.mark.parametrize(("docs", "chars", "facts"), [(1, 400, 1), (3, 1000, 6), (8, 5000, 3)])
def test_exact_sizes_and_every_fact_planted_once(docs: int, chars: int, facts: int) -> None:
    fixture = generate_multidoc(docs, chars, seed=5, facts_per_doc=facts)
    assert len(fixture.documents) == docs
    for doc in fixture.documents:
        assert len(doc.text) == chars
        assert len(doc.facts) == facts
        for key, value in doc.facts.items():
            assert doc.text.count(f"The {key} is {value}.") == 1


def test_values_differ_between_documents() -> None:
    fixture = generate_multidoc(6, 3000, seed=1, facts_per_doc=6)
    for key in FACT_KEYS:
        values = [doc.facts[key] for doc in fixture.documents]
        assert len(set(values)) == len(values)


def test_fixture_sub_model_finds_each_fact() -> None:
    fixture = generate_multidoc(3, 3000, seed=2)
    for doc in fixture.documents:
        for key, value in doc.facts.items():
            assert sub_reply(f"What is the {key}?\n\nText:\n{doc.text}") == value


def test_filler_never_mentions_a_fact_key() -> None:
    filler = " ".join(filler_sentence(i) for i in range(0, SENTENCE_COUNT, 7)).lower()
    assert not any(key in filler for key in FACT_KEYS)


def test_deterministic_and_bad_arguments() -> None:
    assert generate_multidoc(2, 800, seed=3) == generate_multidoc(2, 800, seed=3)
    assert generate_multidoc(2, 800, seed=3).texts != generate_multidoc(2, 800, seed=4).texts
    for args in [(0, 1000), (1, 100)]:
        with pytest.raises(ValueError):
            generate_multidoc(*args)
    with pytest.raises(ValueError):
        generate_multidoc(1, 1000, facts_per_doc=len(FACT_KEYS) + 1)
