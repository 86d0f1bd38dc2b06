"""The allowed modules, in process: refusals say what to use instead, and the docs and the
system prompt name what model code can import."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from rlm_sandbox.modules import ALLOWED_MODULES, IMPORTABLE, import_module
from rlm_sandbox.policy import PrintSink, compile_code, new_namespace

ROOT = Path(__file__).resolve().parents[2]


def run(source: str) -> str:
    sink = PrintSink(10_000)
    exec(compile_code(textwrap.dedent(source)), new_namespace(sink))
    return sink.text()


@pytest.mark.parametrize(("source", "hint"), [
    ("import pandas", "not installed; use statistics, math, collections and csv"),
    ("import some_package_nobody_made", "third-party packages are not installed"),
    ("import os.path", "no files here: the input is `context`"),
    ("import subprocess", "llm_query_batched"),
    ("import urllib.request", "no network"),
    ("from xml.dom import minidom", "use xml.etree.ElementTree"),
    ("import bs4", "html.parser"),
    ("import pickle", "use json"),
])
def test_a_refused_import_says_what_to_use_instead_and_lists_what_is_allowed(
        source: str, hint: str) -> None:
    with pytest.raises(ImportError) as info:
        run(source)
    message = str(info.value)
    assert hint in message
    assert message.endswith("Allowed: " + ", ".join(IMPORTABLE))


@pytest.mark.parametrize(("source", "hint"), [
    ("from io import open", "io.StringIO(text)"),
    ("import io\nio.FileIO", "io.StringIO(text)"),
    ("from gzip import open", "gzip.decompress(data)"),
    ("import codecs\ncodecs.open", "codecs.decode(data, encoding)"),
    ("from shlex import shlex", "shlex.split(text)"),
    ("from contextlib import ExitStack", "nested with statements"),
])
def test_a_withheld_name_says_what_to_use_instead(source: str, hint: str) -> None:
    with pytest.raises((ImportError, AttributeError), match=re.escape(hint)):
        run(source)


def test_interpreter_modules_stay_out() -> None:
    for name in ("types", "inspect", "gc", "sys", "importlib", "ctypes", "builtins"):
        assert name not in ALLOWED_MODULES
        with pytest.raises(ImportError):
            import_module(name)


def test_the_docs_list_every_importable_module() -> None:
    text = (ROOT / "docs" / "sandbox.md").read_text(encoding="utf-8")
    listed = " ".join(text.split("## What model code may import", 1)[1].split("\n\n")[1].split())
    names = {re.sub(r" \(.*\)", "", n).strip().rstrip(".") for n in listed.split(", ")}
    assert names | {"collections.abc"} == set(IMPORTABLE)


def test_the_system_prompt_names_only_importable_modules() -> None:
    text = (ROOT / "prompts" / "rlm" / "prompts" / "system.md").read_text(encoding="utf-8")
    line = " ".join(text.split("Imports allowed:", 1)[1].split("and more", 1)[0].split())
    names = [part.split()[0] for part in line.split(",") if part.strip()]
    assert len(names) >= 15
    assert set(names) <= set(IMPORTABLE), set(names) - set(IMPORTABLE)
