"""`rlm run --cache`: a re-run replays from the journal and sends nothing.

Real CLI subprocesses against the fixture server over loopback, real SQLite.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlm.fixtures.needle import generate_needle
from tests.cli.test_cli import QUESTION, rlm
from tests.helpers import rlm_in_process, serving


@pytest.fixture
def haystack(tmp_path: Path) -> tuple[Path, str]:
    fixture = generate_needle(200_000, seed=11, depth=0.4)
    path = tmp_path / "haystack.txt"
    path.write_text(fixture.text, encoding="utf-8")
    return path, fixture.answer


async def _run(url: str, path: Path, cache: Path, model: str, *extra: str) -> dict[str, object]:
    done = await rlm(
        "run", QUESTION, "--context-file", str(path), "--base-url", url, "--model", model,
        "--cache", str(cache), "--json", "-q", *extra,
    )
    assert done.returncode in (0, 3), done.stderr.decode()
    out: dict[str, object] = json.loads(done.stdout)
    return out


async def test_a_cached_rerun_sends_nothing_and_answers_the_same(
    tmp_path: Path, haystack: tuple[Path, str]
) -> None:
    path, answer = haystack
    cache = tmp_path / "cache.sqlite3"
    async with serving() as (url, server):
        first = await _run(url, path, cache, "fixture")
        sent = server.stats.total_requests
        second = await _run(url, path, cache, "fixture")
        assert server.stats.total_requests == sent  # not one request the second time
        # read-only never writes; refresh sends everything again and stores it.
        await _run(url, path, cache, "fixture", "--cache-mode", "read-only")
        assert server.stats.total_requests == sent
        third = await _run(url, path, cache, "fixture", "--cache-mode", "refresh")
        assert server.stats.total_requests == 2 * sent
    assert first["answer"] == second["answer"] == third["answer"] == answer
    assert first["cached_calls"] == 0 and first["usage"]["llm_calls"] == sent  # type: ignore[index]
    assert second["cached_calls"] == sent and second["usage"]["llm_calls"] == 0  # type: ignore[index]
    # The replayed answers were written by the fixture model (behind the server): still said.
    assert first["answered_by"] == second["answered_by"] == ["fixture"]


async def test_an_interrupted_run_resumes_past_what_it_finished(
    tmp_path: Path, haystack: tuple[Path, str]
) -> None:
    path, answer = haystack
    cache = tmp_path / "cache.sqlite3"
    async with serving() as (url, server):
        stopped = await _run(url, path, cache, "fixture-sequential", "--max-llm-calls", "5")
        assert stopped["status"] == "budget_exceeded"
        first_sent = server.stats.total_requests
        resumed = await _run(url, path, cache, "fixture-sequential")
        resumed_sent = server.stats.total_requests - first_sent
        fresh = await _run(url, path, tmp_path / "fresh.sqlite3", "fixture-sequential")
    assert resumed["answer"] == fresh["answer"] == answer
    assert resumed["cached_calls"] == first_sent == 5
    total = fresh["usage"]["llm_calls"]  # type: ignore[index]
    assert resumed_sent == total - first_sent


def test_cache_mode_without_a_cache_is_a_usage_error(tmp_path: Path) -> None:
    done = rlm_in_process("run", QUESTION, "--provider", "fixture", "--cache-mode", "read-only")
    assert done.returncode == 2
    assert "Error: --cache-mode needs --cache PATH" in done.stderr


def test_read_only_never_makes_a_cache(tmp_path: Path) -> None:
    # A mistyped path would replay nothing and send (and pay for) every request.
    missing = tmp_path / "typo.sqlite3"
    done = rlm_in_process("run", QUESTION, "--provider", "fixture", "--cache", str(missing),
                          "--cache-mode", "read-only", "--context-file", "-", "-q",
                          stdin="some text")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"Error: --cache {missing}: no such cache;")
    assert not missing.exists()


def test_a_cache_that_cannot_be_opened_is_named_by_its_flag(tmp_path: Path) -> None:
    done = rlm_in_process("run", QUESTION, "--provider", "fixture", "--cache", str(tmp_path),
                          "--context-file", "-", "-q", stdin="some text")
    assert done.returncode == 1
    assert done.stderr.startswith(f"Error: --cache {tmp_path} is a directory")


def test_an_empty_cache_path_says_it_is_empty(tmp_path: Path) -> None:
    done = rlm_in_process("run", QUESTION, "--provider", "fixture", "--cache", "",
                          "--context-file", "-", "-q", stdin="some text")
    assert done.returncode == 2
    assert done.stderr.startswith("Error: --cache is empty: give a journal file path")
