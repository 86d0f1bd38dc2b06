"""Every shipped sample regenerates to its recorded sha256."""

from __future__ import annotations

import pytest

from rlm.fixtures._samples import SAMPLES, SAMPLES_DIR, recorded_sums, sample_bytes, sha256


def test_every_sample_is_recorded() -> None:
    assert sorted(recorded_sums()) == sorted(SAMPLES)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_sample_regenerates_to_its_recorded_hash(name: str) -> None:
    data = sample_bytes(name)
    assert sha256(data) == recorded_sums()[name]
    assert (SAMPLES_DIR / name).read_bytes() == data
