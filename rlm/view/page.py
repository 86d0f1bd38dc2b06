"""The self-contained HTML page: template, styles, script and data in one file.

Nothing in the page reaches the network: styles and script are inline, the
data is JSON in a ``<script type="application/json">`` element, and a
Content-Security-Policy forbids every fetch, image or frame source besides
inline ones.  Long texts travel gzip-compressed (see :mod:`rlm.view.texts`).
"""

from __future__ import annotations

import html
import json
import os
import re
from importlib import resources
from pathlib import Path
from typing import Any

from rlm.errors import UsageError
from rlm.view.load import LoadedTrace
from rlm.view.model import build_model
from rlm.view.texts import TextStore

__all__ = ["assemble", "asset", "json_for_script", "render_page", "write_html", "write_page"]


# In load order: helpers, overview and calls, timeline, then the part that draws it all.
_SCRIPTS = ("base.js", "calls.js", "timeline.js", "main.js")


def asset(name: str) -> str:
    """An asset of the page (a template, a script, a style sheet) as text."""
    return resources.files("rlm.view").joinpath("assets", name).read_text(encoding="utf-8")


def json_for_script(value: Any) -> str:
    """``value`` as JSON that is safe inside a ``<script>`` element."""
    # "<" escaped so no "</script>" or "<!--" inside a text can end the element early.
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")


def assemble(template: str, parts: dict[str, str]) -> str:
    """``template`` with each ``{{name}}`` replaced by ``parts[name]``, in one pass: a text
    in the data that reads "{{script}}" stays text."""
    return re.sub(r"\{\{(\w+)\}\}", lambda m: parts[m.group(1)], template)


def render_page(trace: LoadedTrace) -> str:
    """The HTML page for ``trace``."""
    texts = TextStore()
    model = build_model(trace, texts)
    kind = "volley" if model["run"].get("kind") == "volley" else "run"
    title = f"rlm {kind} · {model['run'].get('status', '')} · {Path(trace.source).name}"
    parts = {
        "title": html.escape(title),
        "style": asset("view.css"),
        "data": json_for_script(model),
        "blobs": json_for_script(texts.blobs),
        "script": "\n".join(asset(name) for name in _SCRIPTS),
    }
    return assemble(asset("page.html"), parts)


def write_page(trace: LoadedTrace, out: str | os.PathLike[str]) -> Path:
    """Write the page for ``trace`` to ``out`` (atomically: a temporary file renamed)."""
    return write_html(render_page(trace), out)


def write_html(page: str, out: str | os.PathLike[str]) -> Path:
    """Write ``page`` to ``out`` atomically (a temporary file renamed); UsageError if it
    cannot be written, and no half page left behind either way."""
    path = Path(out)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.part")
    try:
        tmp.write_bytes(page.encode("utf-8", errors="replace"))
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UsageError(f"cannot write {path}: {exc.strerror}") from exc
    except BaseException:  # Ctrl-C mid-write: no half page left beside the trace
        tmp.unlink(missing_ok=True)
        raise
    return path
