"""docs/events.md documents every event kind and every field an event carries."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import rlm._events as events_module
import rlm.volley.events as volley_events
from rlm._events import Event

DOC = (Path(__file__).resolve().parents[2] / "docs" / "events.md").read_text(encoding="utf-8")


def event_classes() -> list[type[Event]]:
    return [
        cls
        for module in (events_module, volley_events)
        for cls in vars(module).values()
        if isinstance(cls, type) and issubclass(cls, Event) and cls is not Event
    ]


def section(kind: str) -> str:
    match = re.search(
        rf"^### [^\n]*`{kind}`[^\n]*\n(.*?)(?=^### |\Z)", DOC, re.MULTILINE | re.DOTALL
    )
    assert match, f"docs/events.md has no section for {kind}"
    return match.group(1)


def test_every_event_kind_has_a_section_naming_each_of_its_fields() -> None:
    common = {f.name for f in dataclasses.fields(Event)}
    for cls in event_classes():
        text = section(cls.kind)
        for field in dataclasses.fields(cls):
            if field.name in common:
                continue
            assert f"`{field.name}`" in text, f"{cls.kind}.{field.name} is not documented"


def test_the_common_fields_are_documented() -> None:
    for name in ("event", "t", "call_id", "parent_id", "depth"):
        assert f"| `{name}` |" in DOC
