"""`rlm eval` end to end on the fixture model: the 60-item eval over three tiers and two
arms (table, JSON, page), show and compare, re-scoring, an eval worked by `rlm volley work`,
and what a user gets wrong."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import rlm_in_process

RLM = [sys.executable, "-m", "rlm"]
TIERS = ["--tiers", "2k,20k,200k", "--per-tier", "20", "--seed", "7"]


def rlm(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_"))}
    env["RLM_JOURNAL"] = str(tmp / "j.sqlite3")
    return subprocess.run([*RLM, *args], capture_output=True, text=True, env=env, cwd=tmp,
                          timeout=240, check=False)


Done = subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def sixty(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Done]:
    """The issue's eval: 60 needle items (2k, 20k, 200k), arms rlm and direct, priced."""
    tmp = tmp_path_factory.mktemp("eval")
    (tmp / "prices.json").write_text(json.dumps(
        {"fixture": {"input": 1e-6, "output": 4e-6, "context_window": 32_768}}))
    done = rlm(tmp, "eval", "needle", "--provider", "fixture", *TIERS, "--prices",
               str(tmp / "prices.json"), "-y", "--page", str(tmp / "eval.html"))
    assert done.returncode == 0, done.stderr
    return tmp, done


def show_json(tmp: Path, *args: str) -> dict[str, Any]:
    done = rlm(tmp, "eval", "show", "last", "--output-format", "json", *args)
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def test_sixty_items_three_tiers_two_arms_print_the_table(
        sixty: tuple[Path, Done]) -> None:
    _, done = sixty
    table = done.stdout
    assert "needle · 60 items × 2 arms" in table and "complete" in table
    arms, tiers = table.split("accuracy by context size (characters)")
    rows = {line.split()[0]: line for line in arms.splitlines()
            if line.startswith(("rlm ", "direct "))}
    assert rows["rlm"].split()[1] == "1.000"
    assert rows["direct"].split()[1] == "0.667" and "context_window 20" in rows["direct"]
    assert [line.split()[1:] for line in tiers.splitlines() if line.startswith("direct")] == [
        ["1.000", "1.000", "0.000"]]
    assert "[1/120]" in done.stderr  # progress went to stderr


def test_the_json_report_has_every_figure_per_arm_and_tier(
        sixty: tuple[Path, Done]) -> None:
    tmp, _ = sixty
    data = show_json(tmp)
    assert data["status"] == "complete" and data["tiers"] == ["2k", "20k", "200k"]
    rlm_arm, direct = data["arms"]
    assert (rlm_arm["items"], rlm_arm["finished"], rlm_arm["accuracy"]) == (60, 60, 1.0)
    assert [t["accuracy"] for t in direct["tiers"]] == [1.0, 1.0, 0.0]
    assert direct["ci95"][0] < 0.667 < direct["ci95"][1]
    # The RLM reads the large contexts through sub-queries: more calls, more tokens, more cost.
    assert rlm_arm["calls_mean"] > direct["calls_mean"] > 0
    assert rlm_arm["cost_mean"] > direct["cost_mean"] > 0
    assert rlm_arm["latency_p50"] is not None and rlm_arm["latency_p95"] >= rlm_arm["latency_p50"]
    assert len(data["items"]) == 120
    failed = [i for i in data["items"] if i["failure"]]
    assert {(i["arm"], i["tier"], i["failure"], i["calls"]) for i in failed} == {
        ("direct", "200k", "context_window", 0)}
    lines = rlm(tmp, "eval", "show", "last", "--output-format", "jsonl").stdout.splitlines()
    assert [json.loads(line)["type"] for line in lines] == ["eval"] + ["item"] * 120 + ["arm"] * 2


def test_the_page_is_written_and_links_items_to_their_traces(
        sixty: tuple[Path, Done]) -> None:
    tmp, done = sixty
    page = (tmp / "eval.html").read_text(encoding="utf-8")
    assert "Accuracy against context size" in (Path(__file__).parents[2] / "rlm" / "view"
                                               / "assets" / "eval.js").read_text()
    data = json.loads(page.split('id="rlm-data">')[1].split("</script>")[0])
    links = [i["link"] for i in data["items"] if i["link"]]
    assert len(links) == 100  # every task that sent something (20 direct ones did not)
    target = (tmp / links[0].split("#")[0]).resolve()
    assert target.exists() and "#call=t" in links[0]
    assert "page: " in done.stderr


def test_show_rescores_the_stored_outputs_without_running_anything(
        sixty: tuple[Path, Done]) -> None:
    tmp, _ = sixty
    again = show_json(tmp, "--scorer", "numeric:1%")
    assert again["scoring"]["scorer"] == "numeric:1%"
    assert again["arms"][0]["accuracy"] == 1.0
    contains = show_json(tmp, "--scorer", "regex")
    assert contains["arms"][1]["accuracy"] == round(40 / 60, 6)


def test_compare_two_evals_arm_by_arm(
        sixty: tuple[Path, Done]) -> None:
    tmp, _ = sixty
    first = show_json(tmp)["eval_id"]
    other = rlm(tmp, "eval", "needle", "--provider", "fixture", "--tiers", "2k,200k",
                "--per-tier", "20", "--seed", "7", "--arm", "direct", "-y", "-q",
                "--output-format", "json")
    assert other.returncode == 0, other.stderr
    second = json.loads(other.stdout)["eval_id"]
    done = rlm(tmp, "eval", "compare", first, second, "--output-format", "json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    direct = next(a for a in data["arms"] if a["arm"] == "direct")
    assert direct["paired_items"] == 40  # the 2k and 200k items both evals have
    assert direct["accuracy_delta"] == 0.0  # the same items, the same answers
    assert next(a for a in data["arms"] if a["arm"] == "rlm")["b"] is None
    text = rlm(tmp, "eval", "compare", first, second).stdout
    assert "B − A" in text and "+0.000" in text


def test_an_eval_is_worked_by_rlm_volley_work_like_any_volley(tmp_path: Path) -> None:
    from rlm._config import EvalOptions, RunConfig, VolleyOptions
    from rlm._traffic.prices import PriceTable
    from rlm.eval import load_dataset
    from rlm.eval.arms import default_arms
    from rlm.eval.plan import plan_eval
    from rlm.eval.run import create_eval
    from rlm.volley.journaled import JournaledVolley

    config = RunConfig(provider="fixture", max_concurrent=8)
    items = load_dataset("multidoc", tiers=(2_000, 200_000), per_tier=3, seed=2,
                         max_context_bytes=1 << 30)
    plan = plan_eval(items, default_arms(), config=config, prices=PriceTable.default(),
                     dataset="multidoc", options=EvalOptions(), judge_prompt=None)
    with JournaledVolley(str(tmp_path / "j.sqlite3")) as journal:
        eval_id = create_eval(journal, plan, config, VolleyOptions())  # made an rlm volley
    worked = rlm(tmp_path, "volley", "work", eval_id, "-q")
    # The direct arm's 200k items do not fit its window: failed tasks, as a volley says.
    assert worked.returncode == 1 and "9 done, 3 failed, 0 open" in worked.stderr
    data = show_json(tmp_path)
    assert data["eval_id"] == eval_id and data["status"] == "complete"
    rlm_arm, direct = data["arms"]
    assert rlm_arm["accuracy"] == 1.0 and direct["tiers"][0]["accuracy"] == 1.0
    assert direct["failures"] == {"context_window": 3}


def test_with_cache_an_eval_run_again_sends_nothing(tmp_path: Path) -> None:
    args = ["eval", "needle", "--provider", "fixture", "--tiers", "2k,20k", "--per-tier", "2",
            "--cache", str(tmp_path / "cache.sqlite3"), "-y", "-q", "--output-format", "json"]
    first, second = (json.loads(rlm(tmp_path, *args).stdout) for _ in range(2))
    assert all(a["calls_total"] > 0 for a in first["arms"])
    assert [a["calls_total"] for a in second["arms"]] == [0, 0]
    assert [i["output"] for i in second["items"]] == [i["output"] for i in first["items"]]
    assert second["eval_id"] != first["eval_id"]


def test_a_budget_stop_says_how_to_run_the_rest(tmp_path: Path) -> None:
    stopped = rlm(tmp_path, "eval", "needle", "--provider", "fixture", "--tiers", "2k",
                  "--per-tier", "10", "-y", "-q", "--max-llm-calls", "12")
    assert stopped.returncode == 3, stopped.stderr
    hint = next(line for line in stopped.stderr.splitlines() if line.startswith("stopped with"))
    eval_id = json.loads(rlm(tmp_path, "eval", "show", "last", "--output-format",
                             "json").stdout)["eval_id"]
    assert f"`rlm eval --resume {eval_id}` with a larger budget runs them" in hint
    left = int(hint.split()[2])
    resumed = rlm(tmp_path, "eval", "--resume", eval_id, "-y", "-q", "--max-llm-calls",
                  "1000", "--output-format", "json")
    assert resumed.returncode == 0, resumed.stderr
    assert left > 0 and json.loads(resumed.stdout)["status"] == "complete"


@pytest.mark.parametrize(("args", "says"), [
    (["eval"], "give a DATASET"),
    (["eval", "nothing-here.jsonl"], "no dataset file"),
    (["eval", "needle", "--arm", "x=base_url=http://a/v1"], "base_url is the whole eval's"),
    (["eval", "needle", "--scorer", "nope"], "unknown scorer 'nope'"),
    (["eval", "needle", "--tiers", "2x"], "is not a size in characters"),
    (["eval", "--resume", "last", "needle"], "give no DATASET"),
])
def test_mistakes_are_one_line_errors(tmp_path: Path, args: list[str], says: str) -> None:
    done = rlm_in_process(*args, "--provider", "fixture", "--journal",
                          str(tmp_path / "j.sqlite3"))
    assert done.returncode == 2, done.stdout
    assert says in done.stderr and "Traceback" not in done.stderr
