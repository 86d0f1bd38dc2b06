"""Plain data out of the REPL namespace, for a saved session.

Only values made of str, int, float, bool, None, list, tuple, dict, set and
frozenset (nested at most 64 deep, at most MAX_NODES values written out) leave
the sandbox: never functions, classes, modules or other objects.  Each value is
encoded as a tagged JSON tree so tuples and sets survive the trip (JSON has only
lists): ``["v", scalar]``, ``["l"|"t"|"s"|"f", [items]]``, ``["d", [[key, value],
...]]``.  The host turns the trees back into Python literals when the session is
restored.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping

__all__ = ["MAX_DEPTH", "MAX_NODES", "NotPlain", "export_namespace"]

MAX_DEPTH = 64
#: Values one variable may hold, counted as written out: a list that holds itself
#: through shared children (``x = [x, x]`` 60 times) is small in memory but would
#: be 2**60 values written out, so it is left out instead of stalling the save.
MAX_NODES = 2_000_000
_TAGS: dict[type, str] = {list: "l", tuple: "t", set: "s", frozenset: "f"}


class NotPlain(Exception):
    """The value holds something that is not plain data."""


def _written_size(value: object, depth: int, sizes: dict[int, int]) -> int:
    """How many values ``value`` is written out as; each container is counted once
    however often it is shared, so a self-sharing value is sized at once."""
    if depth > MAX_DEPTH:
        raise NotPlain("nested too deep")
    children: Iterable[object]
    if isinstance(value, list | tuple | set | frozenset) and type(value) in _TAGS:
        children = value
    elif isinstance(value, dict) and type(value) is dict:
        children = [*value.keys(), *value.values()]
    else:
        return 1
    known = sizes.get(id(value))
    if known is None:
        known = sizes[id(value)] = 1 + sum(_written_size(c, depth + 1, sizes) for c in children)
    return known


def _encode(value: object, depth: int) -> list[object]:
    if depth > MAX_DEPTH:
        raise NotPlain("nested too deep")
    kind = type(value)  # exact types: a subclass from model code could lie about itself
    if value is None or kind in (bool, int, str):
        return ["v", value]
    if kind is float:
        number = float(value)  # type: ignore[arg-type]  # exactly a float, checked above
        return ["v", number] if math.isfinite(number) else ["x", repr(number)]
    if isinstance(value, list | tuple | set | frozenset) and kind in _TAGS:
        return [_TAGS[kind], [_encode(item, depth + 1) for item in value]]
    if isinstance(value, dict) and kind is dict:
        pairs = value.items()
        return ["d", [[_encode(k, depth + 1), _encode(v, depth + 1)] for k, v in pairs]]
    raise NotPlain(kind.__name__)


def export_namespace(namespace: Mapping[str, object], reserved: Iterable[str]
                     ) -> tuple[str, list[str]]:
    """``(JSON of {name: tree} for every plain-data variable, names left out)``."""
    skip = set(reserved)
    exported: dict[str, object] = {}
    left_out: list[str] = []
    for name, value in namespace.items():
        if name.startswith("_") or name in skip:
            continue
        try:
            if _written_size(value, 0, {}) > MAX_NODES:
                raise NotPlain("too many values")
            exported[name] = _encode(value, 0)
        except (NotPlain, RecursionError):
            left_out.append(name)
    return json.dumps(exported), sorted(left_out)
