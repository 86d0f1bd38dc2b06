"""Events are immutable value records: equal by kind and fields, hashable, readable.

Events are frozen dataclasses; these pin the behaviour code relies on (equality, hashing,
``repr``, ``dataclasses.replace``).
"""

from __future__ import annotations

import dataclasses

import pytest

from rlm._events import CallStarted, Event, SandboxExited, SandboxStarted


def started(**changes: object) -> CallStarted:
    fields: dict[str, object] = {"call_id": "root", "query": "q", "model": "m", "context_chars": 5}
    fields.update(changes)
    return CallStarted(**fields)  # type: ignore[arg-type]


def test_events_are_equal_by_kind_and_every_field() -> None:
    assert started() == started()
    assert started() != started(query="other")
    assert started(t=1.0) != started(t=2.0)  # the common fields count too
    exited = SandboxExited(call_id="root", pid=1, returncode=0, reason="closed")
    started_box = SandboxStarted(call_id="root", pid=1, startup_s=0.0, isolation=[])
    assert exited != started_box  # type: ignore[comparison-overlap]  # other kinds never equal
    assert started() != "root"  # type: ignore[comparison-overlap]  # nor other types, no error


def test_equal_events_hash_alike() -> None:
    assert hash(started()) == hash(started())
    assert len({started(), started(), started(query="other")}) == 2
    with pytest.raises(TypeError):  # a list field makes an event unhashable, as before
        hash(SandboxStarted(pid=1, startup_s=0.0, isolation=["fds"]))


def test_repr_names_the_class_and_every_field() -> None:
    assert repr(started(t=0.5)) == (
        "CallStarted(t=0.5, call_id='root', parent_id=None, depth=0, query='q', model='m', "
        "context_chars=5)"
    )
    assert repr(Event()) == "Event(t=0.0, call_id='', parent_id=None, depth=0)"


def test_events_are_frozen() -> None:
    event = started()
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.query = "changed"  # type: ignore[misc]
