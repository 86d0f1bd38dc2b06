"""The eval's page in a real headless Chromium (networking off): it draws, asks for nothing
besides itself, its two plots are there and say what they plot, and an item's link opens
its run in the trace's `rlm view` page."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlm.testing.chromium import Browser, find_chromium

CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no Chromium found (apt-get install chromium, or set RLM_CHROMIUM=/path/to/chrome)")


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("evalpage")
    (tmp / "prices.json").write_text(json.dumps(
        {"fixture": {"input": 1e-6, "output": 4e-6, "context_window": 32_768}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_"))}
    done = subprocess.run(
        [sys.executable, "-m", "rlm", "eval", "needle", "--provider", "fixture", "--tiers",
         "2k,20k,200k", "--per-tier", "3", "--arm", "rlm", "--arm", "direct", "--arm",
         "d2=max_depth=2", "--prices", str(tmp / "prices.json"), "--journal",
         str(tmp / "j.sqlite3"), "-y", "-q", "--output-format", "json", "--page",
         str(tmp / "eval.html")], capture_output=True, text=True, env=env, timeout=240,
        check=False)
    assert done.returncode == 0, done.stderr
    return tmp / "eval.html", json.loads(done.stdout)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert CHROMIUM is not None
    with Browser(CHROMIUM) as b:
        b.call("Network.enable")
        yield b


def open_page(browser: Browser, url: str) -> None:
    browser.events.clear()
    browser.open(url)
    assert browser.wait_for("document.body.dataset.ready") == "1"
    requested = {e["params"]["request"]["url"].split("#")[0] for e in browser.events
                 if e.get("method") == "Network.requestWillBeSent"}
    assert requested == {url.split("#")[0]}, requested


def test_the_page_draws_both_plots_saying_what_they_plot(
        browser: Browser, page: tuple[Path, dict[str, Any]]) -> None:
    path, report = page
    open_page(browser, path.as_uri())
    plots = browser.evaluate(
        "[...document.querySelectorAll('svg.plot')].map(s => ({id: s.dataset.plot,"
        " label: s.getAttribute('aria-label'), title: s.querySelector('title').textContent,"
        " x: s.querySelector('.x-label').textContent, y: s.querySelector('.y-label').textContent,"
        " ticks: [...s.querySelectorAll(':scope > text')].map(t => t.textContent),"
        " series: [...s.querySelectorAll('g.series')].map(g => [g.dataset.arm,"
        " Number(g.dataset.points), g.querySelectorAll('circle').length])}))")
    by_id = {p["id"]: p for p in plots}
    size, cost = by_id["accuracy-by-size"], by_id["accuracy-by-cost"]
    assert size["label"] == size["title"] == "Accuracy against context size, per arm"
    assert size["x"] == "context size (characters)" and "accuracy" in size["y"]
    assert {"2k", "20k", "200k", "0.00", "1.00"} <= set(size["ticks"])
    # One series per arm, a point per tier (the direct arm's 200k point is 0: it failed).
    assert size["series"] == [[arm["name"], 3, 3] for arm in report["arms"]]
    assert cost["label"] == "Accuracy against mean cost per item, per arm"
    assert cost["x"] == "mean cost per item (USD)"
    assert cost["series"] == [[arm["name"], 1, 1] for arm in report["arms"]]
    assert any(t.startswith("$") and t != "$0" for t in cost["ticks"])
    # The arms' table and every item under every arm.
    assert browser.evaluate("document.querySelectorAll('#arms-table tbody tr').length") == 3
    assert browser.evaluate("document.querySelectorAll('#items-table tbody tr').length") == 9
    cells = browser.evaluate("document.querySelectorAll('#items-table td[data-arm]').length")
    assert cells == 27
    failed = browser.evaluate("[...document.querySelectorAll('#items-table .score.wrong')]"
                              ".map(s => s.textContent)")
    assert failed == ["✗ context_window"] * 3


def test_an_items_link_opens_its_run_in_the_trace(
        browser: Browser, page: tuple[Path, dict[str, Any]]) -> None:
    path, report = page
    open_page(browser, path.as_uri())
    href = browser.evaluate("document.querySelector('#items-table a.trace-link').href")
    item = next(i for i in report["items"] if i["calls"])
    assert href.endswith(f"#call=t{item['task']}")
    open_page(browser, href)
    assert browser.evaluate("document.body.dataset.selected") == f"t{item['task']}"
