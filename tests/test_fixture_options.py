"""The fixture model's pace is the fixture provider's own options, not run settings; what was
stored when it was (volley journals, saved sessions) still reads back."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from rlm import RLM, RunConfig, SettingError
from rlm.cli.volley_journal import resumed_fixture
from rlm.journal.volleys import run_config, stored_fixture, stored_settings
from rlm.providers.fixture import FixtureOptions

TEXT = "filler text. The magic number is 7301. more filler."

# What a journal written before the move kept for `rlm volley --fixture-latency 0.25`.
LEGACY_VOLLEY = {
    "config": {
        **{k: v for k, v in dataclasses.asdict(RunConfig(provider="fixture")).items()
           if k != "api_key"},
        "fixture_root_latency": 0.0,
        "fixture_sub_latency": 0.25,
        "fixture_chunk_chars": 16,
        "fixture_chunk_delay": 0.0,
    },
    "options": {"timeout": None, "cache_warm": True},
}


def test_the_fixture_pace_is_not_a_run_setting() -> None:
    names = {f.name for f in dataclasses.fields(RunConfig)}
    assert not any(name.startswith("fixture_") for name in names)
    with pytest.raises(SettingError, match="must not be negative"):
        FixtureOptions(sub_latency=-1)
    with pytest.raises(SettingError, match="chunk_chars"):
        FixtureOptions(chunk_chars=0)


def test_an_old_volley_journal_reads_back_with_its_fixture_latency() -> None:
    config = run_config(LEGACY_VOLLEY, {}, None)  # the old keys are not settings any more
    assert config.provider == "fixture"
    assert stored_fixture(LEGACY_VOLLEY) == FixtureOptions(sub_latency=0.25)
    assert resumed_fixture(LEGACY_VOLLEY, None) == FixtureOptions(sub_latency=0.25)
    assert resumed_fixture(LEGACY_VOLLEY, 0.5) == FixtureOptions(sub_latency=0.5)


def test_a_new_volley_journal_keeps_the_pace_beside_the_settings() -> None:
    pace = FixtureOptions(sub_latency=0.125)
    stored = json.loads(json.dumps(stored_settings(RunConfig(provider="fixture"), {}, pace)))
    assert stored_fixture(stored) == pace
    assert stored_fixture(stored_settings(RunConfig(), {})) is None


def test_a_session_saved_with_the_old_settings_still_loads(tmp_path: Path) -> None:
    saved = tmp_path / "session.json"
    pace = FixtureOptions(chunk_chars=8)
    with RLM(provider="fixture", fixture=pace).session(TEXT) as session:
        session.completion("What is the magic number?")
        session.save(saved)
    document = json.loads(saved.read_text())
    assert document["settings"]["fixture"] == dataclasses.asdict(pace)
    # As a session saved before the move: the pace as fixture_* settings.
    del document["settings"]["fixture"]
    document["settings"].update(fixture_sub_latency=0.0, fixture_chunk_chars=8)
    saved.write_text(json.dumps(document))
    with RLM.load_session(str(saved), TEXT) as again:
        result = again.completion("What is the magic number?")
    assert result.status == "answered" and result.answer == "7301"
