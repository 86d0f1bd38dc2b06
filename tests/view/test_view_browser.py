"""The `rlm view` page in a real headless Chromium: what a person would see and click.

Chromium runs with networking disabled and is driven over the DevTools
protocol on a pipe (rlm.testing.chromium); every request the page makes is
recorded, and there must be none besides the page itself.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlm.testing.chromium import Browser, find_chromium
from tests.view.view_helpers import QUESTION, events, fixture_run, rlm, rlm_in_process

CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no Chromium found (apt-get install chromium, or set RLM_CHROMIUM=/path/to/chrome)")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert CHROMIUM is not None
    with Browser(CHROMIUM) as b:
        b.call("Network.enable")
        yield b


@pytest.fixture(scope="module")
def run_page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The issue's "done when": `rlm run ... --max-depth 2 --trace t.jsonl && rlm view ...`."""
    tmp = tmp_path_factory.mktemp("page")
    trace = fixture_run(tmp)
    done = rlm("view", str(trace), "-o", str(tmp / "t.html"))
    assert done.returncode == 0, done.stderr
    return trace, tmp / "t.html"


def open_page(browser: Browser, page: Path, fragment: str = "") -> None:
    browser.events.clear()
    browser.open(page.as_uri() + fragment)
    assert browser.wait_for("document.body.dataset.ready") == "1"
    requested = [e["params"]["request"]["url"] for e in browser.events
                 if e.get("method") == "Network.requestWillBeSent"]
    assert {url.split("#")[0] for url in requested} == {page.as_uri()}, requested


def text_of(browser: Browser, selector: str) -> str:
    value = browser.evaluate(
        f"(document.querySelector({json.dumps(selector)}) || {{innerText: ''}}).innerText")
    return str(value)


def test_the_page_shows_the_run_its_calls_and_one_bar_per_request(
        browser: Browser, run_page: tuple[Path, Path]) -> None:
    trace_path, page = run_page
    trace = events(trace_path)
    open_page(browser, page)
    overview = text_of(browser, "#overview")
    finished = next(e for e in trace if e["event"] == "run_finished")
    assert QUESTION in overview and finished["answer"] in overview
    assert f"{finished['llm_calls']:,}" in overview
    # The tree: every call, children nested under their parent.
    started = {e["call_id"]: e["parent_id"] for e in trace if e["event"] == "call_started"}
    shown = browser.evaluate(
        "[...document.querySelectorAll('#tree .node')].map(n => [n.dataset.call,"
        " n.parentElement.parentElement.closest('li')?.firstChild.dataset.call ?? null])")
    assert dict(shown) == started
    assert len(started) == 5  # root and its 4 children
    # The timeline: one bar per LLM request (no retries here, so one attempt each).
    requests = [e for e in trace if e["event"] == "llm_request"]
    assert len({e["request_id"] for e in requests}) == len(requests)
    bars = browser.evaluate("Object.assign({}, document.getElementById('timeline').dataset)")
    assert int(bars["bars"]) == len(requests)
    assert int(bars["barsRoot"]) == sum(1 for e in requests if e["lane"] == "root")
    print(f"\nrender: {browser.evaluate('document.body.dataset.renderMs')} ms "
          f"for {len(requests)} requests")


def test_clicking_a_call_shows_its_steps_code_and_output(
        browser: Browser, run_page: tuple[Path, Path]) -> None:
    trace_path, page = run_page
    trace = events(trace_path)
    open_page(browser, page)
    browser.click('#tree .node[data-call="root.2"]')
    assert browser.evaluate("document.body.dataset.selected") == "root.2"
    detail = text_of(browser, "#detail")
    steps = [e for e in trace if e["event"] == "step_completed" and e["call_id"] == "root.2"]
    blocks = [e for e in trace if e["event"] == "code_executed" and e["call_id"] == "root.2"]
    assert browser.evaluate("document.querySelectorAll('#detail .step').length") == len(steps)
    assert browser.evaluate("document.querySelectorAll('#detail .block').length") == len(blocks)
    codes = browser.evaluate("[...document.querySelectorAll('#detail .block pre.code')]"
                             ".map(p => p.textContent)")
    assert codes == [block["code"] for block in blocks]
    for block in blocks:
        assert block["output"].strip() in detail
    # Its sub-queries, one row each, under the bridge call that asked for them.
    subs = [e for e in trace if e["event"] == "llm_request" and e["call_id"] == "root.2"
            and e["depth"] == 2]
    assert browser.evaluate("document.querySelectorAll('#detail .items tbody tr').length") == \
        len(subs)
    bridge = next(e for e in trace if e["event"] == "bridge_call_finished"
                  and e["call_id"] == "root.2")
    answers = browser.evaluate("[...document.querySelectorAll('#detail .items tbody tr')]"
                               ".map(r => r.cells[2].innerText.trim())")
    assert answers == [a.strip() for a in bridge["answers"]]
    reply = steps[0]["reply"]
    assert reply.splitlines()[0] in detail
    # The link back to the parent opens the root, whose bridge call lists the children.
    browser.click("#detail .call-head .call-link")
    assert browser.evaluate("document.body.dataset.selected") == "root"
    links = browser.evaluate("[...document.querySelectorAll('#detail .bridge .call-link')]"
                             ".map(a => a.textContent)")
    assert sorted(links) == sorted(c for c in {e["call_id"] for e in trace
                                               if e["event"] == "call_started"} if c != "root")


def test_a_link_to_a_call_opens_it(browser: Browser, run_page: tuple[Path, Path]) -> None:
    open_page(browser, run_page[1], "#call=root.3")
    assert browser.evaluate("document.body.dataset.selected") == "root.3"
    assert text_of(browser, "#detail .call-head").startswith("root.3")


def test_a_cut_trace_shows_its_calls_and_says_it_was_cut(
        browser: Browser, run_page: tuple[Path, Path], tmp_path: Path) -> None:
    lines = run_page[0].read_text(encoding="utf-8").splitlines(keepends=True)
    # Two thirds of the lines whole, then half of the next: always cut inside a line, and
    # the calls the page can show are those whose line is whole (a cut line is dropped).
    whole, torn = lines[: len(lines) * 2 // 3], lines[len(lines) * 2 // 3]
    cut = tmp_path / "cut.jsonl"
    cut.write_text("".join(whole) + torn[: len(torn) // 2], encoding="utf-8")
    assert rlm_in_process("view", str(cut)).returncode == 0
    open_page(browser, tmp_path / "cut.html")
    assert "last line was cut" in text_of(browser, "#notices")
    assert "unfinished" in text_of(browser, "#run-status")
    shown = browser.evaluate("document.querySelectorAll('#tree .node').length")
    assert shown == sum(json.loads(line)["event"] == "call_started" for line in whole)


def test_dragging_across_the_timeline_zooms_to_that_range(
        browser: Browser, run_page: tuple[Path, Path]) -> None:
    trace = events(run_page[0])
    open_page(browser, run_page[1])
    dataset = "Object.assign({}, document.getElementById('timeline').dataset)"
    whole = browser.evaluate(dataset)
    browser.evaluate("document.getElementById('timeline').scrollIntoView({block: 'center'})")
    box = browser.evaluate("(() => { const r = document.getElementById('tl-canvas')"
                           ".getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; })()")
    y = box[1] + box[3] / 2
    browser.drag((box[0] + box[2] * 0.45, y), (box[0] + box[2] * 0.7, y))
    zoomed = browser.evaluate(dataset)
    v0, v1 = float(zoomed["v0"]), float(zoomed["v1"])
    assert 0 < v0 < v1 < float(whole["v1"])
    # Exactly the attempts that overlap the chosen range are drawn.
    sent = {(e["request_id"], e["attempt"]): e["t"] for e in trace if e["event"] == "llm_request"}
    ended = {(e["request_id"], e["attempt"]): e["t"] for e in trace if e["event"] == "llm_response"}
    overlapping = sum(1 for key, t in sent.items() if t <= v1 and ended[key] >= v0)
    assert int(zoomed["bars"]) == overlapping < int(whole["bars"])
    browser.click("#tl-reset")
    assert browser.evaluate(dataset)["bars"] == whole["bars"]


def test_a_step_with_many_bridge_calls_lists_them_a_page_at_a_time(
        browser: Browser, tmp_path: Path) -> None:
    """A loop of llm_query calls (here the fixture's sequential probe, after the budget
    refused its batch) must not build every bridge call's table at once."""
    trace = fixture_run(tmp_path, "--model", "fixture:200", "--max-llm-calls", "150",
                        "--max-depth", "1")
    assert rlm_in_process("view", str(trace), "-o", str(tmp_path / "many.html")).returncode == 0
    bridges = [e for e in events(trace) if e["event"] == "bridge_call_finished"]
    # Step 1: the batch the budget refused; step 2: one llm_query per chunk.
    assert [e["fn"] for e in bridges[:2]] == ["llm_query_batched", "llm_query"]
    probes = bridges[1:]
    assert len(probes) > 50
    open_page(browser, tmp_path / "many.html")
    step2 = "#detail .step[data-step='2']"
    count = f"document.querySelectorAll({json.dumps(step2 + ' .bridge')}).length"
    assert browser.evaluate(count) == 50
    assert f"of {len(probes) - 50} bridge calls" in text_of(browser, f"{step2} .more-bridges")
    more = f"document.querySelector({json.dumps(step2 + ' .more-bridges')}).hidden"
    for shown_now in range(100, len(probes) + 50, 50):  # each click lists 50 more
        browser.click(f"{step2} .more-bridges")
        assert browser.evaluate(count) == min(shown_now, len(probes))
    assert browser.evaluate(more)  # nothing left to show
    shown = browser.evaluate(f"[...document.querySelectorAll({json.dumps(step2 + ' .bridge')})]"
                             ".map(b => Number(b.dataset.bridge))")
    # In the order they started (auto-batching sends the probes ahead: they finish in any).
    started = [e["bridge_id"] for e in events(trace) if e["event"] == "bridge_call_started"]
    assert shown == started[1:] and sorted(shown) == sorted(e["bridge_id"] for e in probes)


@pytest.mark.slow
def test_ten_thousand_sub_queries_render_and_the_time_is_reported(
        browser: Browser, tmp_path: Path) -> None:
    """Measured, not asserted: the render time is printed (run with -s to see it)."""
    context = tmp_path / "F.txt"
    from rlm.fixtures.needle import generate_needle
    context.write_text(generate_needle(200_000, seed=1).text, encoding="utf-8")
    done = rlm("run", QUESTION, "--context-file", str(context), "--provider", "fixture",
               "--model", "fixture:10000", "--max-concurrent", "64",
               # 10,001 requests: above the default --max-llm-calls, which would refuse the batch.
               "--max-llm-calls", "none", "--trace",
               str(tmp_path / "big.jsonl"), "-q")
    assert done.returncode == 0, done.stderr
    started = time.perf_counter()
    assert rlm_in_process("view", str(tmp_path / "big.jsonl")).returncode == 0
    written = time.perf_counter() - started
    page = tmp_path / "big.html"
    open_page(browser, page)
    bars = int(browser.evaluate("document.getElementById('timeline').dataset.bars"))
    assert bars == 10_001
    ready_ms = browser.evaluate("document.body.dataset.renderMs")
    print(f"\n10,000 sub-queries: page {page.stat().st_size / 2**20:.1f} MB written in "
          f"{written:.2f} s; ready in the browser {ready_ms} ms after navigation start")


def test_a_loop_auto_batching_sent_ahead_is_shown_on_its_step(
        browser: Browser, tmp_path: Path) -> None:
    """The fixture's sequential llm_query loop: its loop_batched event on the step, each call
    marked as sent ahead; with --no-auto-batch, neither."""
    loop_step = "#detail .step .loop"
    for flag in ("--auto-batch", "--no-auto-batch"):
        trace = fixture_run(tmp_path, "--model", "fixture-sequential:16", "--max-depth", "1",
                            flag)
        page = tmp_path / f"{flag}.html"
        assert rlm_in_process("view", str(trace), "-o", str(page)).returncode == 0
        loops = [e for e in events(trace) if e["event"] == "loop_batched"]
        open_page(browser, page)
        shown = text_of(browser, loop_step)
        if flag == "--no-auto-batch":
            assert loops == [] and shown == ""
            assert "sent ahead" not in text_of(browser, "#detail")
            continue
        [loop] = loops
        assert loop["calls"] == loop["used"] == 16 and loop["cancelled"] == 0
        assert f"loop at line {loop['line']} ran concurrently" in shown
        assert "16 calls sent ahead" in shown and "16 used" in shown
        assert "0 cancelled" in shown and f"window {loop['window']}" in shown
        ahead = browser.evaluate("[...document.querySelectorAll('#detail .bridge')]"
                                 ".filter(b => b.innerText.includes('sent ahead')).length")
        assert ahead == 16
