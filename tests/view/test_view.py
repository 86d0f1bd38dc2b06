"""`rlm view` without a browser: bad input, cut and newer traces, what the page's data holds."""

from __future__ import annotations

import base64
import gzip
import json
import re
from pathlib import Path
from typing import Any

import pytest

from rlm.view import load_trace, parse_trace
from rlm.view.model import build_model
from rlm.view.texts import HEAD_CHARS, INLINE_CHARS, TIGHT_HEAD, TIGHT_TAIL, TextStore
from tests.view.view_helpers import events, fixture_run, rlm, rlm_in_process


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("view")
    fixture_run(tmp)
    return tmp


def page_data(html: str) -> dict[str, Any]:
    match = re.search(r'<script type="application/json" id="rlm-data">(.*?)</script>', html,
                      re.DOTALL)
    assert match
    value: dict[str, Any] = json.loads(match.group(1))
    return value


def test_view_writes_a_self_contained_page(run_dir: Path) -> None:
    done = rlm("view", "t.jsonl", "-o", "page.html", cwd=run_dir)  # once as a real process
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "page.html"
    html = (run_dir / "page.html").read_text(encoding="utf-8")
    # Nothing to fetch: no external script, style, image or font, and a CSP that forbids it.
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "default-src 'none'" in html
    data = page_data(html)
    trace = events(run_dir / "t.jsonl")
    started = [e["call_id"] for e in trace if e["event"] == "call_started"]
    assert sorted(c["id"] for c in data["calls"]) == sorted(started)
    root = next(c for c in data["calls"] if c["parent"] is None)
    assert sorted(root["children"]) == sorted(c for c in started if c != "root")
    assert len(data["timeline"]["attempts"]["request_id"]) == sum(
        1 for e in trace if e["event"] == "llm_request")
    assert data["run"]["status"] == "answered"
    assert data["run"]["answer"] == next(e["answer"] for e in trace
                                         if e["event"] == "run_finished")


def test_default_output_is_the_trace_path_with_html(run_dir: Path) -> None:
    done = rlm_in_process("view", str(run_dir / "t.jsonl"))
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == run_dir / "t.html"
    assert (run_dir / "t.html").stat().st_size > 0


def test_a_killed_runs_trace_is_found_under_its_temporary_name(run_dir: Path,
                                                               tmp_path: Path) -> None:
    """A run killed with `kill -9` never renamed .run.jsonl.PID.part to run.jsonl."""
    text = (run_dir / "t.jsonl").read_text(encoding="utf-8")
    (tmp_path / ".run.jsonl.4321.part").write_text(text[: len(text) // 2 - 7], encoding="utf-8")
    done = rlm_in_process("view", str(tmp_path / "run.jsonl"))
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == tmp_path / "run.html"
    assert ".run.jsonl.4321.part" in done.stderr and "last line was cut" in done.stderr
    assert page_data((tmp_path / "run.html").read_text(encoding="utf-8"))["calls"]


def test_a_chats_trace_path_points_at_its_per_question_traces(run_dir: Path,
                                                              tmp_path: Path) -> None:
    """`rlm chat --trace chat.jsonl` writes chat.1.jsonl, chat.2.jsonl …, never chat.jsonl."""
    text = (run_dir / "t.jsonl").read_text(encoding="utf-8")
    for n in (1, 2, 10):
        (tmp_path / f"chat.{n}.jsonl").write_text(text, encoding="utf-8")
    done = rlm_in_process("view", str(tmp_path / "chat.jsonl"))
    assert done.returncode == 2
    assert done.stderr.startswith(f"Error: no trace file at {tmp_path / 'chat.jsonl'}: a chat "
                                  "given --trace chat.jsonl writes one per question "
                                  "(chat.1.jsonl, chat.2.jsonl, chat.10.jsonl)"), done.stderr
    assert f"`rlm view {tmp_path / 'chat.1.jsonl'}`" in done.stderr


@pytest.mark.parametrize(("content", "message"), [
    (None, "no trace file at"),
    ("just some text\nnot json at all\n", "is not an rlm trace"),
    ("", "is not an rlm trace"),
    ('{"event": "something_else", "t": 0}\n', "is not an rlm trace"),
])
def test_bad_input_is_a_clear_error(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "x.jsonl"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    done = rlm_in_process("view", str(path), "-o", str(tmp_path / "x.html"))
    assert done.returncode == 2
    assert done.stderr.startswith("Error: ") and message in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "x.html").exists()
    assert not list(tmp_path.glob(".*part"))  # no half-written page


def test_a_cut_trace_shows_what_is_there_and_says_it_was_cut(run_dir: Path,
                                                             tmp_path: Path) -> None:
    text = (run_dir / "t.jsonl").read_text(encoding="utf-8")
    cut = tmp_path / "cut.jsonl"
    cut.write_text(text[: len(text) // 2 - 7], encoding="utf-8")  # mid-line
    done = rlm_in_process("view", str(cut))
    assert done.returncode == 0, done.stderr
    assert "last line was cut" in done.stderr
    data = page_data((tmp_path / "cut.html").read_text(encoding="utf-8"))
    assert any("last line was cut" in n for n in data["notices"])
    assert data["run"]["status"] == "unfinished"
    loaded = parse_trace(text[: len(text) // 2 - 7])
    assert len(data["calls"]) == sum(1 for e in loaded.events if e["event"] == "call_started")
    # Every bridge call the trace saw start is on the timeline; those still waiting at the
    # cut (the root's fan-out at least) end at the trace's end.
    started = [e for e in loaded.events if e["event"] == "bridge_call_started"]
    finished = {(e["call_id"], e["bridge_id"]) for e in loaded.events
                if e["event"] == "bridge_call_finished"}
    open_ones = [e["call_id"] for e in started if (e["call_id"], e["bridge_id"]) not in finished]
    assert "root" in open_ones
    bridges = data["timeline"]["bridges"]
    assert len(bridges["call_id"]) == len(started)
    ends = [t1 for call, t1 in zip(bridges["call_id"], bridges["t1"], strict=True)
            if call == "root"]
    assert ends == [data["timeline"]["end"]]


@pytest.mark.foreign_traces  # an event kind from a newer rlm
def test_events_from_a_newer_rlm_are_named_and_the_rest_is_shown(run_dir: Path,
                                                                 tmp_path: Path) -> None:
    newer = tmp_path / "newer.jsonl"
    lines = (run_dir / "t.jsonl").read_text(encoding="utf-8").splitlines()
    lines.insert(3, json.dumps({"event": "warp_drive_engaged", "t": 0.1, "call_id": "root",
                                "parent_id": None, "depth": 0, "factor": 9}))
    newer.write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = rlm_in_process("view", str(newer))
    assert done.returncode == 0, done.stderr
    assert "warp_drive_engaged ×1" in done.stderr and "newer rlm" in done.stderr
    data = page_data((tmp_path / "newer.html").read_text(encoding="utf-8"))
    assert data["run"]["status"] == "answered"


def test_a_bad_line_in_the_middle_is_skipped_and_counted() -> None:
    good = json.dumps({"event": "call_started", "t": 0.0, "call_id": "root", "parent_id": None,
                       "depth": 0, "query": "q", "model": "m", "context_chars": 1})
    loaded = parse_trace(f"{good}\n{{oops\n{good}\n")
    assert loaded.bad_lines == 1 and loaded.bad_line_numbers == [2]
    assert not loaded.truncated
    assert len(loaded.events) == 2


def test_long_texts_are_folded_stored_once_and_cut_beyond_the_budget() -> None:
    long = "".join(f"line {i}: {i * 7919 % 10007}\n" for i in range(600))
    sizing = TextStore()
    sizing.add(long)
    short = "x" * INLINE_CHARS
    # Room for the short text, one copy and its head (what the page shows counts too).
    store = TextStore(budget_bytes=sizing.used + sizing.shown + len(short) + 100)
    assert store.add(short) == short
    first, again = store.add(long), store.add(long)
    assert isinstance(first, dict) and first == again and first["n"] == len(long)
    assert len(store.blobs) == 1  # stored once
    other = store.add(long + "something else")  # no room left
    assert isinstance(other, dict) and other["b"] == -1 and other["tail"].endswith("else")
    assert store.dropped == 1


def test_past_the_inline_budget_texts_fold_sooner_so_many_long_prompts_stay_small() -> None:
    # Thousands of bridge calls, each with its own long prompt: the page must not hold
    # a 1,000-char head of every one on top of the compressed copies.
    texts = [f"prompt {i}: " + "".join(f"{(i * 31 + j) % 997} " for j in range(500))
             for i in range(3_000)]
    store = TextStore(budget_bytes=2**20, inline_chars=2**20)
    values = [store.add(t) for t in texts]
    shown = sum(len(v) if isinstance(v, str) else len(v["head"]) + len(v.get("tail", ""))
                for v in values if v is not None)
    assert store.shown == shown
    assert shown <= 2**20 + 3_000 * (TIGHT_HEAD + TIGHT_TAIL)  # not 3,000 x 1,000
    assert sum(map(len, store.blobs)) <= 2**20
    first, last = values[0], values[-1]
    assert isinstance(first, dict) and len(first["head"]) == HEAD_CHARS
    assert isinstance(last, dict) and len(last["head"]) == TIGHT_HEAD
    assert all(isinstance(v, dict) and v["n"] == len(t) for v, t in zip(values, texts, strict=True))
    # A short text still shows whole.
    assert store.add("NOT FOUND") == "NOT FOUND"


def test_a_child_call_shows_its_whole_query_from_the_bridge_call_that_started_it(
        run_dir: Path) -> None:
    trace = events(run_dir / "t.jsonl")
    started = {e["call_id"]: e["query"] for e in trace if e["event"] == "call_started"}
    bridge = next(e for e in trace if e["event"] == "bridge_call_finished"
                  and e["call_id"] == "root")
    texts = TextStore()
    calls = {c["id"]: c for c in build_model(load_trace(run_dir / "t.jsonl"), texts)["calls"]}
    children = [c for c in calls if c != "root"]
    assert len(children) == len(bridge["prompts"]) == 4
    for child in children:
        query = calls[child]["query"]
        assert len(started[child]) == 500  # what call_started keeps
        # Folded, with the whole prompt's length, and unfolding gives the whole prompt.
        assert isinstance(query, dict) and query["head"].startswith(started[child])
        whole = gzip.decompress(base64.b64decode(texts.blobs[query["b"]])).decode()
        assert query["n"] == len(whole) and whole in bridge["prompts"]
        assert whole.startswith(started[child])
    assert len({calls[c]["query"]["b"] for c in children}) == 4


def test_the_model_attributes_steps_code_and_sub_queries_to_their_calls(run_dir: Path) -> None:
    trace = events(run_dir / "t.jsonl")
    model = build_model(load_trace(run_dir / "t.jsonl"))
    calls = {c["id"]: c for c in model["calls"]}
    for call_id, call in calls.items():
        steps = sum(1 for e in trace if e["event"] == "step_completed" and e["call_id"] == call_id)
        blocks = sum(1 for e in trace if e["event"] == "code_executed" and e["call_id"] == call_id)
        assert len(call["steps"]) == steps
        assert sum(len(s["blocks"]) for s in call["steps"]) == blocks
    child = calls["root.1"]
    bridge = next(b for s in child["steps"] for b in s["bridges"])
    subs = [e for e in trace if e["event"] == "llm_request" and e["call_id"] == "root.1"
            and e["depth"] == 2]
    assert bridge["requests"] == [e["request_id"] for e in subs]
    root_bridge = next(b for s in calls["root"]["steps"] for b in s["bridges"])
    assert sorted(root_bridge["children"]) == sorted(c for c in calls if c != "root")


def test_a_full_trace_has_the_content_once_and_a_meta_trace_none(run_dir: Path,
                                                                 tmp_path: Path) -> None:
    trace = events(run_dir / "t.jsonl")
    started = next(e for e in trace if e["event"] == "run_started")
    assert started["system_prompt"] and "api_key" not in started["config"]
    text = (run_dir / "t.jsonl").read_text(encoding="utf-8")
    assert text.count(json.dumps(started["system_prompt"], ensure_ascii=False)[1:200]) == 1
    by_call: dict[str, list[dict[str, Any]]] = {}
    for e in trace:
        if e["event"] == "step_completed":
            by_call.setdefault(e["call_id"], []).append(e)
    for steps in by_call.values():
        sent = 0
        for step in steps:
            # Each request reuses the call's previous one and adds only what is new.
            assert step["request"]["reused"] == sent
            sent = step["request"]["reused"] + len(step["request"]["new"])
            assert len(step["reply"]) == step["reply_chars"]
    assert all(e["code"] for e in trace if e["event"] == "code_executed")
    meta = fixture_run(tmp_path, "--trace-content", "meta", "--no-history")
    blank = events(meta)
    for e in blank:
        for name in ("reply", "request", "code", "output", "prompts", "answers",
                     "system_prompt", "answer", "query"):
            assert e.get(name) is None, (e["event"], name)
    sizes = [e["reply_chars"] for e in blank if e["event"] == "step_completed"]
    assert sizes and all(n > 0 for n in sizes)
    assert rlm_in_process("view", str(meta)).returncode == 0
    data = page_data(meta.with_suffix(".html").read_text(encoding="utf-8"))
    assert data["run"]["content"] == "meta"


def test_a_volley_trace_shows_its_tasks_as_roots(run_dir: Path) -> None:
    done = rlm("volley", "What is the magic number?", "What was the magic number?",
               "--context-file", str(run_dir / "F.txt"), "--provider", "fixture",
               "--trace", str(run_dir / "vol.jsonl"), "-q")
    assert done.returncode == 0, done.stderr
    trace = events(run_dir / "vol.jsonl")
    model = build_model(load_trace(run_dir / "vol.jsonl"))
    tasks = {e["call_id"]: e for e in trace if e["event"] == "task_finished"}
    assert {c["id"] for c in model["calls"]} == set(tasks)
    for call in model["calls"]:
        assert call["parent"] is None and call["status"] == tasks[call["id"]]["status"]
        assert call["answer"] == tasks[call["id"]]["output"]
    assert model["run"]["kind"] == "volley" and model["notices"] == []
    assert model["run"]["status"] == next(e["status"] for e in trace
                                          if e["event"] == "volley_finished")
    # Each task's query is its prompt (it said "not recorded in this trace").
    queries = sorted(call["query"] for call in model["calls"])  # short texts are inline
    assert queries == ["What is the magic number?", "What was the magic number?"]


def test_a_plain_runs_page_shows_no_bench_comparison_and_a_bench_runs_does(
    run_dir: Path, tmp_path: Path
) -> None:
    page = rlm("view", str(run_dir / "t.jsonl"), "-o", str(tmp_path / "p.html"))
    assert page.returncode == 0, page.stderr
    data = page_data((tmp_path / "p.html").read_text())
    assert data["time"]["bench"] == {}  # an η of 0.1 read as a failure to anyone not benching
    bench_trace = tmp_path / "bench.jsonl"
    lines = (run_dir / "t.jsonl").read_text().splitlines()
    marked = []
    for line in lines:  # as rlm bench's provider records each response's nominal latency
        event = json.loads(line)
        if event["event"] == "llm_response":
            event["metadata"] = {**event.get("metadata", {}),
                                 "nominal_latency_s": event["latency_s"]}
        marked.append(json.dumps(event))
    bench_trace.write_text("\n".join(marked) + "\n")
    rlm("view", str(bench_trace), "-o", str(tmp_path / "b.html"))
    bench = page_data((tmp_path / "b.html").read_text())["time"]["bench"]
    assert bench["eta"] is not None and bench["t_star"] > 0


def test_code_run_while_a_reply_streams_belongs_to_that_step(tmp_path: Path) -> None:
    trace_path = fixture_run(tmp_path, "--stream", "--no-history")
    trace = events(trace_path)
    assert any(e.get("pipelined") for e in trace if e["event"] == "code_executed")
    model = build_model(load_trace(trace_path))
    for call in model["calls"]:
        for step in call["steps"]:
            assert len(step["blocks"]) <= step["code_blocks"] + 1  # + a FINAL_VAR look-up
            for block in step["blocks"]:
                assert block["code"] in step["reply"] or block["code"].startswith("FINAL_VAR")


def test_the_readme_shows_a_screenshot_of_the_page() -> None:
    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text(encoding="utf-8")
    images = re.findall(r"!\[[^\]]+\]\((docs/[^)]+\.png)\)", readme)
    assert "docs/view-run.png" in images
    assert (root / "docs" / "view-run.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
