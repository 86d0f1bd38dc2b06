"""Write what is generated from the settings table: ``python -m rlm._settings_gen``.

Two files are made from the rows of ``rlm/_config.py`` and committed, so that
an editor sees them and a reader finds them; ``tests/api/test_settings_table.py``
fails when either is not what this would write now:

- ``rlm/_settings_types.py``: the keyword arguments of ``RLM(...)``,
  ``RLM.session(...)`` and ``RLM.volley(...)`` as TypedDicts (``Unpack``), so a
  misspelt setting is flagged where it is written;
- ``docs/settings.md``: the settings reference.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from rlm._config import EvalOptions, RunConfig, SessionOptions, VolleyOptions
from rlm._settings import Setting, settings_of

__all__ = ["settings_doc", "types_module"]

_CLASSES = ((RunConfig, "RunSettings"), (SessionOptions, "SessionSettings"),
            (VolleyOptions, "VolleySettings"))
# Names the annotations use that the generated module must import from rlm._config.
_ALIASES = ("CacheMode", "ProviderName", "TraceContent", "VolleyMode")


def types_module() -> str:
    """The source of rlm/_settings_types.py."""
    lines = [
        '"""Keyword arguments of ``RLM(...)``, ``session(...)`` and ``volley(...)``.',
        "",
        "Generated from the settings table (rlm/_config.py) by `python -m rlm._settings_gen`:",
        'do not edit by hand."""',
        "",
        "from __future__ import annotations",
        "",
        "from typing import TypedDict",
        "",
        f"from rlm._config import {', '.join(_ALIASES)}",
        "",
        "__all__ = [" + ", ".join(f'"{name}"' for name in sorted(n for _, n in _CLASSES)) + "]",
    ]
    for cls, name in _CLASSES:
        lines += ["", "", f"class {name}(TypedDict, total=False):",
                  f'    """The settings of :class:`rlm.{cls.__name__}`, each optional."""', ""]
        for f in _annotated(cls):
            lines.append(f"    {f[0]}: {f[1]}")
    return "\n".join(lines) + "\n"


def _annotated(cls: type) -> list[tuple[str, str]]:
    """Each setting's name and its annotation as written in the class."""
    written = {name: str(kind) for name, kind in cls.__annotations__.items()}
    return [(row.name, written[row.name]) for row in settings_of(cls)]


def settings_doc() -> str:
    """The source of docs/settings.md."""
    out = [
        "# Settings",
        "",
        "Every setting of rlm, generated from the settings table (`rlm/_config.py`) by",
        "`python -m rlm._settings_gen`. A setting has one name everywhere: the keyword of",
        "`RLM(...)` (or of `session(...)` / `volley(...)`), the key in `rlm.toml` and in a",
        "`[profiles.NAME]` table, and, with dashes, the flag of the commands that offer it.",
        "",
        "Precedence, highest first: flags, environment variables, the chosen profile",
        "(`--profile NAME` or `RLM_PROFILE`), the config files' top-level keys, the defaults.",
        "`rlm config show` prints every value and where it came from. In a config file, a",
        "duration or a size may be written as on the command line (`timeout = \"30m\"`,",
        "`sandbox_memory = \"1GiB\"`) and `\"none\"` lifts a limit. API keys are read from the",
        "environment only (`RLM_API_KEY`, or `OPENAI_API_KEY` / `ANTHROPIC_API_KEY`).",
        "",
        "Errors name a setting the way you gave it: `RLM(max_depth=0)` raises",
        "`SettingError: max_depth must be a positive integer, got 0`; `rlm run --max-depth 0`",
        "prints `Error: --max-depth must be a positive integer, got 0`.",
    ]
    titles = {
        "run": ("Run settings", "One run's: `RLM(...)`, `rlm run`; each question of a session "
                "and each task of a volley is bounded by them as one run is."),
        "session": ("Session settings", "`RLM(...).session(context, ...)` and `rlm chat`."),
        "volley": ("Volley settings", "`RLM(...).volley(tasks, ...)` and `rlm volley`."),
        "eval": ("Eval settings", "`rlm eval` (see docs/eval.md); its arms' tasks are bounded "
                 "by the run settings."),
    }
    for cls in (*(cls for cls, _ in _CLASSES), EvalOptions):
        rows = settings_of(cls)
        title, intro = titles[rows[0].scope]
        out += ["", f"## {title}", "", intro, "",
                "| Setting | Flag | Default | Commands | What it does |",
                "|---|---|---|---|---|"]
        out += [_row(row) for row in rows]
    return "\n".join(out) + "\n"


def _row(row: Setting) -> str:
    spec = row.spec
    flag = "—"
    if spec.commands:
        flag = f"`{row.flag}`" + (f" / `{spec.off_flag}`" if spec.off_flag else "")
    commands = ", ".join(f"`{c}`" for c in sorted(spec.commands))
    if not commands:
        commands = "Python" if spec.secret else "Python, config files"
    own = "; ".join(f"{c}: {_shown(v, row)}" for c, v in sorted(spec.defaults.items()))
    default = _shown(row.default, row) + (f" ({own})" if own else "")
    text = spec.help + (f" Environment: `{spec.env}`." if spec.env else "")
    return f"| `{row.name}` | {flag} | {default} | {commands} | {_cell(text)} |"


def _shown(value: Any, row: Setting) -> str:
    if row.spec.shown and value == row.default:
        return f"`{row.spec.shown}`"
    if value is None:
        return "none"
    if value == ():
        return "—"
    return f"`{value!r}`" if isinstance(value, str) else f"`{value}`"


def _cell(text: str) -> str:
    return re.sub(r"\s+", " ", text).replace("|", "\\|")


def main(root: Path) -> None:
    (root / "rlm" / "_settings_types.py").write_text(types_module(), encoding="utf-8")
    (root / "docs" / "settings.md").write_text(settings_doc(), encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1])
