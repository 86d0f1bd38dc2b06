"""The needle-in-a-haystack generator and ``rlm fixture needle``."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from rlm.cli.fixture_cmds import fixture_group
from rlm.fixtures import MIN_CHARS, QUESTION, generate_needle

# sha256 of generate_needle(5000, seed=1).text: changes only if the generator does.
GOLDEN_5000_SEED_1 = "718631141aaf1edfac775c084e4e0717a3aa0d294de98e7fb5a7864951293106"


def test_golden_text_is_stable() -> None:
    text = generate_needle(5000, seed=1).text
    assert hashlib.sha256(text.encode()).hexdigest() == GOLDEN_5000_SEED_1


def test_same_seed_same_text_different_seed_different_text() -> None:
    a, b, c = (generate_needle(20_000, seed=s) for s in (7, 7, 8))
    assert a == b
    assert a.text != c.text
    assert a.answer != c.answer


@pytest.mark.parametrize("chars", [MIN_CHARS, MIN_CHARS + 1, 999, 20_000, 123_457])
@pytest.mark.parametrize("depth", [0.0, 0.25, 0.5, 1.0])
def test_exact_length_and_one_whole_needle(chars: int, depth: float) -> None:
    fixture = generate_needle(chars, seed=3, depth=depth)
    needle = f"The magic number is {fixture.answer}."
    assert len(fixture.text) == chars
    assert fixture.text.count(needle) == 1
    assert fixture.text.lower().count("magic number") == 1
    assert fixture.text[fixture.position :].startswith(needle)
    assert fixture.question == QUESTION == "What is the magic number?"
    assert len(fixture.answer) == 7 and fixture.answer.isdigit()


@pytest.mark.parametrize("depth", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_needle_lands_near_depth(depth: float) -> None:
    chars = 100_000
    fixture = generate_needle(chars, seed=2, depth=depth)
    # At a sentence boundary at or just before the target.
    assert abs(fixture.position - depth * chars) < 200


def test_filler_never_mentions_the_magic_number() -> None:
    fixture = generate_needle(300_000, seed=11)
    filler = fixture.text.replace(fixture.needle, "")
    assert "magic" not in filler.lower()
    assert "number is" not in filler.lower()


def test_too_small_or_bad_depth_is_an_error() -> None:
    with pytest.raises(ValueError, match=f"at least {MIN_CHARS}"):
        generate_needle(MIN_CHARS - 1)
    with pytest.raises(ValueError, match="depth"):
        generate_needle(1000, depth=1.5)


def test_ten_million_chars_is_fast() -> None:
    start = time.perf_counter()
    fixture = generate_needle(10_000_000, seed=5)
    assert time.perf_counter() - start < 2.0
    assert len(fixture.text) == 10_000_000


def test_cli_writes_text_to_stdout_and_reports_the_needle() -> None:
    result = CliRunner().invoke(fixture_group, ["needle", "--chars", "3000", "--seed", "4"])
    assert result.exit_code == 0, result.output
    fixture = generate_needle(3000, seed=4)
    assert result.stdout == fixture.text
    expected = f'planted: "{fixture.needle}" at char {fixture.position} (seed 4)'
    assert result.stderr.strip() == expected


def test_cli_writes_output_file_atomically(tmp_path: Path) -> None:
    target = tmp_path / "big.txt"
    args = ["needle", "--chars", "5000", "--seed", "1", "--depth", "0.9", "--output", str(target)]
    result = CliRunner().invoke(fixture_group, args)
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert target.read_text(encoding="utf-8") == generate_needle(5000, seed=1, depth=0.9).text
    assert [p.name for p in tmp_path.iterdir()] == ["big.txt"]  # no temp file left


@pytest.mark.parametrize(
    "args",
    [["--chars", "100"], ["--depth", "1.5"], ["--depth", "-0.1"], ["--chars", "many"]],
)
def test_cli_bad_values_are_usage_errors(args: list[str]) -> None:
    result = CliRunner().invoke(fixture_group, ["needle", *args])
    assert result.exit_code == 2
    assert "Invalid value" in result.stderr


def test_cli_unwritable_output_is_a_usage_error(tmp_path: Path) -> None:
    target = tmp_path / "missing-dir" / "big.txt"
    args = ["needle", "--chars", "500", "--output", str(target)]
    result = CliRunner().invoke(fixture_group, args)
    assert result.exit_code == 2
    assert "cannot write" in result.stderr
