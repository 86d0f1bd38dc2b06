"""`--otel` end to end: the real CLI exports over OTLP/HTTP to a receiver on loopback.

The exporter is the SDK's own, configured by the standard OTEL_* variables; the
receiver decodes what it is sent with the OTLP protobuf classes (otlp_receiver.py).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

from rlm.fixtures.needle import generate_needle
from tests.otel.otel_helpers import call_tree, trace_call_tree
from tests.otel.otlp_receiver import Received, otlp_receiver
from tests.view.view_helpers import QUESTION, events, fixture_run

NEEDLE = generate_needle(8_000, seed=3)


def otel_env(received: Received, **more: str) -> dict[str, str]:
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": received.url, "NO_PROXY": "127.0.0.1", **more}


def rlm(*args: str, env: dict[str, str], stdin: str | None = None,
        ) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items()
            if not k.startswith(("RLM_", "OPENAI_", "OTEL_"))} | env
    return subprocess.run([sys.executable, "-m", "rlm", *args], input=stdin, env=full,
                          capture_output=True, text=True, timeout=120, check=False)


def test_a_depth_two_run_is_one_trace_whose_spans_nest_as_its_call_tree(tmp_path: Path) -> None:
    """The issue's "done when"."""
    with otlp_receiver() as received:
        trace = fixture_run(tmp_path, "--otel",
                            env=otel_env(received, OTEL_SERVICE_NAME="needle-hunt"))
    spans = received.spans
    assert len({s.trace_id for s in spans}) == 1
    run = events(trace)
    tree = call_tree(spans)
    assert tree == trace_call_tree(run) and len(tree) == 5  # the root and its 4 children
    llm = [s for s in spans if s.name.startswith("chat ")]
    assert len(llm) == sum(1 for e in run if e["event"] == "llm_request")
    for span in llm:
        assert span.attributes["gen_ai.usage.input_tokens"] > 0
        assert span.attributes["gen_ai.usage.output_tokens"] > 0
        assert {"gen_ai.system", "gen_ai.request.model", "rlm.lane", "rlm.call_id",
                "rlm.depth"} <= span.attributes.keys()
    (root,) = [s for s in spans if s.parent_id is None]
    assert root.name == "rlm.run"
    assert root.resource["service.name"] == "needle-hunt"  # the SDK's own variable
    assert "service.version" in root.resource


def test_a_chat_session_is_one_trace(tmp_path: Path) -> None:
    context = tmp_path / "F.txt"
    context.write_text(NEEDLE.text, encoding="utf-8")
    with otlp_receiver() as received:
        done = rlm("chat", "--context-file", str(context), "--provider", "fixture", "--otel",
                   "--json", env=otel_env(received), stdin=f"{QUESTION}\n{QUESTION}\n")
    assert done.returncode == 0, done.stderr
    spans = received.spans
    assert len({s.trace_id for s in spans}) == 1
    (session,) = [s for s in spans if s.parent_id is None]
    runs = [s for s in spans if s.name == "rlm.run"]
    assert session.name == "rlm.session" and len(runs) == 2
    assert {s.parent_id for s in runs} == {session.span_id}


def test_a_volley_is_one_trace_and_meta_keeps_its_prompts_out(tmp_path: Path) -> None:
    context = tmp_path / "F.txt"
    context.write_text(NEEDLE.text, encoding="utf-8")
    secret_question = "Which colour is the hidden flamingo?"
    with otlp_receiver() as received:
        done = rlm("volley", QUESTION, secret_question, "--context-file", str(context),
                   "--provider", "fixture", "--otel", "--trace-content", "meta", "-q",
                   env=otel_env(received))
    assert done.returncode == 0, done.stderr
    spans = received.spans
    assert len({s.trace_id for s in spans}) == 1
    names = Counter(s.name for s in spans)
    assert names["rlm.volley"] == 1 and names["rlm.task"] == 2
    body = b"".join(received.bodies)
    assert secret_question.encode() not in body and NEEDLE.answer.encode() not in body


def test_otel_without_the_extra_is_a_one_line_error(tmp_path: Path) -> None:
    # An empty regular package named opentelemetry, first on the path, hides the SDK.
    (tmp_path / "opentelemetry").mkdir()
    (tmp_path / "opentelemetry" / "__init__.py").write_text("")
    done = rlm("run", QUESTION, "--provider", "fixture", "--otel",
               env={"PYTHONPATH": str(tmp_path)})
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "Error: --otel needs the OpenTelemetry SDK and its OTLP exporter "
        "(opentelemetry.sdk.trace is not installed): pip install 'rlm[otel]'")
    assert done.stdout == ""


def test_the_setting_turns_it_on_from_the_environment() -> None:
    with otlp_receiver() as received:
        done = rlm("run", QUESTION, "--provider", "fixture", "--no-history",
                   env=otel_env(received, RLM_OTEL="1"))
    assert done.returncode == 0, done.stderr
    assert any(s.name == "rlm.run" for s in received.spans)


def test_a_collector_that_cannot_be_reached_never_fails_the_run() -> None:
    with socket.socket() as closed:  # a loopback port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    done = rlm("run", QUESTION, "--provider", "fixture", "--no-history", "--otel", "--json",
               env={"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
                    "OTEL_EXPORTER_OTLP_TIMEOUT": "1", "NO_PROXY": "127.0.0.1"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "answered"
    assert "Traceback" not in done.stderr
