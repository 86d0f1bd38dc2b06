"""`rlm run` against an endpoint whose reply is 100 MB: a clear error naming the cap,
nothing huge left in the run history (no half-written trace either)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import trio

from tests.providers.test_response_size import HUGE, HugeServer, huge_server


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
async def test_rlm_run_refuses_a_100_mb_reply_and_keeps_no_huge_file(
    tmp_path: Path, streamed: bool
) -> None:
    server = HugeServer(streamed=streamed, announced=False)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_"))}
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    (tmp_path / "ctx.txt").write_text("a small context", encoding="utf-8")
    async with huge_server(server) as url:
        done = await trio.run_process(
            [sys.executable, "-m", "rlm", "run", "q", "--context-file",
             str(tmp_path / "ctx.txt"), "--base-url", url, "--model", "m", "-q",
             *(["--stream"] if streamed else [])],
            env=env, capture_stdout=True, capture_stderr=True, check=False,
        )
    stderr = done.stderr.decode()
    error = stderr.rstrip().splitlines()[-1]  # streamed: the text shown before it
    assert done.returncode == 1, stderr[-2000:]
    assert error.startswith("Error: ") and "--max-response-bytes (8MiB)" in error, error
    assert "Traceback" not in stderr
    assert server.sent < HUGE // 4
    files = [p for p in (tmp_path / "state").rglob("*") if p.is_file()]
    assert files and not [p for p in files if p.name.endswith(".part")]
    assert max(p.stat().st_size for p in files) < 1 << 20, files
