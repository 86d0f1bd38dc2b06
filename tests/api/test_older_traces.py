"""Traces of the previous schema version keep loading: `rlm runs`, `rlm view`, the T* replay.

``trace_v1/`` is a run history as rlm wrote it before traces had a schema header (schema
version 1): ``runs/<ID>/summary.json`` and ``trace.jsonl`` of a depth-2 fixture run
(``rlm run ... --provider fixture --model fixture:2 --max-depth 2``) and of an ``--rlm``
volley of two tasks.  They are kept as written then; never regenerate them.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlm._trace_schema import check_trace
from rlm.testing.chromium import Browser, find_chromium
from rlm.view import load_trace
from rlm.view.limit import ideal_makespan, work_from_trace
from rlm.view.phases import _observed_latency
from tests.helpers import rlm_in_process

V1 = Path(__file__).with_name("trace_v1")
RUN = "20261128-231805-042178-8140"
VOLLEY = "20261128-231814-013971-65bf"
CHROMIUM = find_chromium()


def v1_trace(run_id: str) -> Path:
    return V1 / "runs" / run_id / "trace.jsonl"


@pytest.fixture
def state(tmp_path: Path) -> dict[str, str]:
    """An environment whose run history is a copy of ``trace_v1``."""
    shutil.copytree(V1, tmp_path / "state" / "rlm")
    return {"XDG_STATE_HOME": str(tmp_path / "state")}


def test_a_version_1_trace_has_no_header_and_matches_the_schema() -> None:
    for run_id in (RUN, VOLLEY):
        text = v1_trace(run_id).read_text(encoding="utf-8")
        assert json.loads(text.split("\n", 1)[0])["event"] in ("run_started", "volley_started")
        assert load_trace(v1_trace(run_id)).schema_version == 1
        # Version 2 only added the header: a version-1 trace's events are version-2 events.
        assert check_trace(text) == []


def test_rlm_runs_lists_them(state: dict[str, str]) -> None:
    done = rlm_in_process("runs", "--json", env=state)
    assert done.returncode == 0, done.stderr
    listed = {run["id"]: run for run in json.loads(done.stdout)}
    assert listed.keys() == {RUN, VOLLEY}
    assert listed[RUN]["status"] == "answered" and listed[RUN]["answer"] == "3141681"
    assert listed[VOLLEY]["status"] == "succeeded" and listed[VOLLEY]["calls"] == 2
    assert all(Path(run["trace"]).is_file() for run in listed.values())
    shown = rlm_in_process("runs", "show", RUN, env=state)
    assert shown.returncode == 0 and "3141681" in shown.stdout


def test_the_replay_of_t_star_reads_them() -> None:
    events = load_trace(v1_trace(RUN)).events
    work = work_from_trace(events, _observed_latency)
    assert work.call_id == "root"
    assert len(list(work.requests())) == sum(1 for e in events if e["event"] == "llm_request")
    assert 0 < ideal_makespan(work, sub_permits=7) <= events[-1]["duration_s"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if CHROMIUM is None:
        pytest.skip("no Chromium found (apt-get install chromium, or set RLM_CHROMIUM)")
    with Browser(CHROMIUM) as b:
        yield b


@pytest.mark.parametrize("run_id", [RUN, VOLLEY])
def test_rlm_view_renders_them(run_id: str, state: dict[str, str], tmp_path: Path,
                               browser: Browser) -> None:
    page = tmp_path / "page.html"
    done = rlm_in_process("view", run_id, "-o", str(page), env=state)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "", done.stderr  # no notice: nothing was left out
    browser.open(page.as_uri())
    assert browser.wait_for("document.body.dataset.ready") == "1"
    events = load_trace(v1_trace(run_id)).events
    calls = {e["call_id"] for e in events if e["event"] == "call_started"}
    shown = browser.evaluate("[...document.querySelectorAll('#tree .node')]"
                             ".map(n => n.dataset.call)")
    assert sorted(shown) == sorted(calls)
    assert len(calls) == (3 if run_id == RUN else 2)
    bars = browser.evaluate("document.getElementById('timeline').dataset.bars")
    assert int(bars) == sum(1 for e in events if e["event"] == "llm_request")
