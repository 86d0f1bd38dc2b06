"""The price table: USD per token, per model, shipped as data and overridable.

A model is matched by its exact name, then by the longest listed name it
starts with (so ``gpt-4.1-mini-2025-04-14`` is priced as ``gpt-4.1-mini``) and
with any ``provider/`` prefix removed (``openai/gpt-4.1``).  Models with no
match are *unpriced*: their tokens are counted, their cost is unknown, and a
``--max-cost`` budget refuses to spend on them rather than treat them as free.
A provider-reported cost (OpenRouter's ``usage.cost``) wins over the table.

A model's entry may also give its rates through the provider's batch service
(``batch_input``, ``batch_output``, ``batch_cached_input``, ``batch_cache_write_input``:
about half the live ones); :meth:`PriceTable.batch` is the table of those, in which a
model without batch rates is unpriced.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlm._files import ReadLimits, read_text
from rlm.errors import UsageError

__all__ = ["CACHE_WRITE_FACTOR", "ModelPrice", "PriceTable"]


_DATA = Path(__file__).resolve().parent.parent / "data"

#: Anthropic bills a prompt-cache write (5-minute cache) at 1.25 times the input rate.
CACHE_WRITE_FACTOR = 1.25


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """USD per token.  ``cache_write_input`` prices input written to a prompt cache
    (reported by Anthropic as ``cache_creation_input_tokens``); a table entry
    without it gets 1.25 times ``input``."""

    input: float
    output: float
    cached_input: float
    cache_write_input: float | None = None
    #: Tokens the model takes, prompt and answer together (``context_window`` in the
    #: table; None where it does not say): an eval's direct arm is held to it.
    context_window: int | None = None

    def cost(
        self,
        input_tokens: int,
        output_tokens: int,
        cached_tokens: int = 0,
        cache_write_tokens: int = 0,
    ) -> float:
        """``input_tokens`` counts all input, cache reads and writes included."""
        written = min(cache_write_tokens, max(0, input_tokens - cached_tokens))
        uncached = max(0, input_tokens - cached_tokens - written)
        write_rate = (
            self.cache_write_input
            if self.cache_write_input is not None
            else self.input * CACHE_WRITE_FACTOR
        )
        return (
            uncached * self.input
            + cached_tokens * self.cached_input
            + written * write_rate
            + output_tokens * self.output
        )


_FOUND_MAX = 256  # model names remembered per table (a run uses one or two)


class PriceTable:
    """Prices by model name."""

    def __init__(
        self, prices: dict[str, ModelPrice], batch: dict[str, ModelPrice] | None = None
    ) -> None:
        self._prices = dict(prices)
        self._batch = dict(batch or {})
        # Every request is priced twice (reserve, settle); a model the table does not
        # name exactly costs a scan of every entry each time.
        self._found: dict[str, ModelPrice | None] = {}

    @classmethod
    def default(cls) -> PriceTable:
        """The table shipped in ``rlm/data/prices.json``."""
        live, batch = _shipped_prices()
        return cls(live, batch)

    @classmethod
    def load(cls, path: str | Path, *, base: PriceTable | None = None,
             what: str = "price table") -> PriceTable:
        """The table in ``path``, on top of ``base`` (entries in the file win).  Read by
        the bounded reader of named files: a device, a pipe or a huge file is refused
        in a UsageError naming ``what`` (the setting that named the file)."""
        text = read_text(str(path), "utf-8", what, limits=ReadLimits.file_only())
        prices = dict(base._prices) if base is not None else {}
        batch = dict(base._batch) if base is not None else {}
        live, batch_rates = _parse(text, str(path))
        for model in live:  # an entry in the file replaces the base's, batch rates and all
            batch.pop(model, None)
        prices.update(live)
        batch.update(batch_rates)
        return cls(prices, batch)

    def batch(self) -> PriceTable:
        """The rates of the providers' batch services: a model whose entry gives none is
        unpriced here (its cost unknown, refused under ``max_cost``), never live-priced."""
        return PriceTable(self._batch)

    def lookup(self, model: str) -> ModelPrice | None:
        if model in self._found:
            return self._found[model]
        if len(self._found) >= _FOUND_MAX:
            self._found.clear()
        found = self._found[model] = self._find(model)
        return found

    def _find(self, model: str) -> ModelPrice | None:
        name = model.split("/", 1)[1] if "/" in model else model
        for candidate in (model, name):
            if candidate in self._prices:
                return self._prices[candidate]
        matches = [key for key in self._prices if name.startswith(key)]
        return self._prices[max(matches, key=len)] if matches else None


@functools.cache
def _shipped_prices() -> tuple[dict[str, ModelPrice], dict[str, ModelPrice]]:
    """Read and parsed once per process; PriceTable copies it, so it is never mutated."""
    # Read beside the package, as rlm.prompts reads its texts: importlib.resources would
    # be one more import at every run's start, for one file that is always on disk.
    text = (_DATA / "prices.json").read_text(encoding="utf-8")
    return _parse(text, "rlm/data/prices.json")


_KEYS = ("input", "output", "cached_input", "cache_write_input")


def _parse(text: str, source: str) -> tuple[dict[str, ModelPrice], dict[str, ModelPrice]]:
    """The live prices and the batch prices (of the entries that give them) in ``text``."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"price table {source} is not valid JSON: {exc.msg} at line {exc.lineno}, "
            f"column {exc.colno}"
        ) from exc
    if not isinstance(raw, dict):
        raise UsageError(f"price table {source} must be a JSON object of model → prices")
    prices: dict[str, ModelPrice] = {}
    batch: dict[str, ModelPrice] = {}
    for model, entry in raw.items():
        if model.startswith("_"):
            continue  # comments
        line = _line_of(text, model)
        if not isinstance(entry, dict):
            raise UsageError(f"price table {source}, line {line}: {model!r} must map to an object")
        where = f"price table {source}, line {line}"
        window = entry.get("context_window")
        if window is not None and (isinstance(window, bool) or not isinstance(window, int)
                                   or window < 1):
            raise UsageError(f"{where}: 'context_window' of {model!r} must be a positive "
                             "whole number of tokens")
        prices[model] = _price(entry, "", model, where, window)
        if any(f"batch_{key}" in entry for key in _KEYS):
            batch[model] = _price(entry, "batch_", model, where, window)
    return prices, batch


def _price(
    entry: dict[str, Any], prefix: str, model: str, where: str, window: int | None
) -> ModelPrice:
    """The rates ``prefix`` names in ``entry`` (``""``: live; ``batch_``: batch); the
    model's ``context_window`` is the same either way."""
    keys = [prefix + key for key in _KEYS]
    try:
        values = {k: float(entry.get(k, 0.0)) for k in keys}
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{where}: prices for {model!r} must be numbers") from exc
    if keys[0] not in entry or keys[1] not in entry or min(values.values()) < 0:
        raise UsageError(
            f"{where}: {model!r} needs non-negative '{keys[0]}' and '{keys[1]}' prices (USD "
            "per token)"
        )
    cached = values[keys[2]] if keys[2] in entry else values[keys[0]]
    return ModelPrice(
        values[keys[0]], values[keys[1]], cached,
        values[keys[3]] if keys[3] in entry else None, window,
    )


def _line_of(text: str, key: str) -> int:
    index = text.find(json.dumps(key))
    return text.count("\n", 0, index) + 1 if index >= 0 else 1
