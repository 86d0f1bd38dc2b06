"""Auto-batching at run time: the sub-queries a sequential loop is about to ask, sent ahead.

Model code still runs one statement at a time, as written.  Where the compiler
(:mod:`rlm_sandbox.autobatch`) found a loop whose ``llm_query`` prompts can be
computed from the loop's items before the body runs, the loop iterates
through a :class:`Lookahead`: at the start of each item it predicts the
prompts of the next items and offers them to the host (a ``speculate`` bridge
frame), which sends them at once under its gate.  When the body then calls
``llm_query`` with a prompt that was offered, :meth:`Speculator.take` finds it
and the call collects that answer (``collect``) instead of asking anew; any
other prompt is asked as before.  Answers, variables, printed output and
exceptions are therefore the sequential run's: only when requests are sent
changes.

Bounds.  In one execution, the speculative calls outstanding plus those
already wasted never exceed ``window`` (the sub lane's capacity, sent in the
``exec`` frame): at most one window of calls is sent that the sequential run
would not have sent.  A lookahead stops for good, and cancels what it has
outstanding, as soon as an item ends without using what was offered for it
(its prediction was wrong: when in doubt, run sequentially); at its end (the
loop finished, broke or raised) it cancels what is left.  The host may accept
fewer offers than it was sent (the budget); what it did not accept is asked
normally when the code gets there.

Predictions run code the compiler generated from the model's own expressions,
compiled under the same policy, through the guards below (the ``_ab_*_``
names of the namespace): they read only plain data (str, numbers, bytes, and
lists, tuples, dicts and sets of those, exact types) and call only builtins and
methods that cannot run model code or change anything.  Anything else raises
:class:`Unpredictable`, and the item is not predicted.
"""

from __future__ import annotations

import builtins
import types
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, cast, final

__all__ = ["Key", "Lookahead", "Speculator", "Unpredictable", "guard_names"]

#: What identifies a sub-query: its prompt, its context, its schema (JSON text).
Key = tuple[str, str | None, str | None]
#: Sends one bridge frame (``fn`` and its fields) and returns the host's reply.
Send = Callable[..., dict[str, Any]]


class Unpredictable(Exception):
    """A prediction would need a value or an operation the guards do not allow."""


class _End(Exception):
    """No item there (yet)."""


# --- guards for generated prediction code ------------------------------------------------

_ATOMS = frozenset({str, int, float, bool, type(None), bytes, complex, range})
_CONTAINERS = frozenset({list, tuple, dict, set, frozenset})
#: Builtin types are plain values too (``schema={"name": str}``).
_TYPE_VALUES = frozenset(id(t) for t in (str, int, float, bool, list, dict))
#: Elements a deep check visits before it gives up (the prediction, not the loop).
DEEP_LIMIT = 10_000


def shallow(value: object) -> object:
    """``_ab_v_``: ``value`` if its own type is plain (its elements are checked where used)."""
    kind = type(value)
    if kind in _ATOMS or kind in _CONTAINERS or id(value) in _TYPE_VALUES:
        return value
    raise Unpredictable(kind.__name__)


def deep(value: object) -> object:
    """``_ab_deep_``: ``value`` if it and everything in it is plain data: formatting,
    comparing or hashing it then runs no model code."""
    stack, seen = [value], 0
    while stack:
        item = stack.pop()
        kind = type(item)
        seen += 1
        if seen > DEEP_LIMIT:
            raise Unpredictable("too large to check")
        if kind in _ATOMS or id(item) in _TYPE_VALUES:
            continue
        if isinstance(item, dict):  # exactly a dict: the types were checked above
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            stack.extend(item)
        else:
            raise Unpredictable(kind.__name__)
    return value


#: Builtins a prediction may call, by identity, and whether their arguments are
#: checked deeply (they format, compare or hash the elements) or shallowly.
_BUILTIN_DEPTH: dict[int, tuple[object, bool]] = {
    id(fn): (fn, deep_args) for fn, deep_args in [
        (builtins.len, False), (builtins.range, False), (builtins.enumerate, False),
        (builtins.zip, False), (builtins.list, False), (builtins.tuple, False),
        (builtins.reversed, False), (builtins.str, True), (builtins.repr, True),
        (builtins.ascii, True), (builtins.format, True), (builtins.int, True),
        (builtins.float, True), (builtins.bool, True), (builtins.abs, True),
        (builtins.round, True), (builtins.min, True), (builtins.max, True),
        (builtins.sum, True), (builtins.sorted, True), (builtins.chr, True),
        (builtins.ord, True), (builtins.hex, True), (builtins.oct, True),
        (builtins.bin, True), (builtins.dict, True), (builtins.set, True),
    ]
}

_STR_METHODS = frozenset({
    "capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find",
    "format", "index", "isalnum", "isalpha", "isdigit", "islower", "isnumeric", "isspace",
    "istitle", "isupper", "join", "ljust", "lower", "lstrip", "partition", "removeprefix",
    "removesuffix", "replace", "rfind", "rindex", "rjust", "rpartition", "rsplit", "rstrip",
    "split", "splitlines", "startswith", "strip", "swapcase", "title", "upper", "zfill",
})
#: Methods a prediction may call, by the receiver's exact type: none changes anything.
METHODS: dict[type, frozenset[str]] = {
    str: _STR_METHODS,
    bytes: frozenset({"decode", "count", "find", "startswith", "endswith", "strip", "split"}),
    list: frozenset({"copy", "count", "index"}),
    tuple: frozenset({"count", "index"}),
    dict: frozenset({"copy", "get", "items", "keys", "values"}),
}


def call(fn: object, *args: object, **kwargs: object) -> object:
    """``_ab_call_``: a call of one of the allowed builtins (not a name rebound to another)."""
    entry = _BUILTIN_DEPTH.get(id(fn))
    if entry is None or entry[0] is not fn:
        raise Unpredictable("not a known builtin")
    check = deep if entry[1] else shallow
    for value in (*args, *kwargs.values()):
        check(value)
    return fn(*args, **kwargs)  # type: ignore[operator]


def method(obj: object, name: str, *args: object, **kwargs: object) -> object:
    """``_ab_method_``: ``obj.name(*args)`` for the methods in :data:`METHODS`."""
    kind = type(obj)
    if name not in METHODS.get(kind, ()):
        raise Unpredictable(f"{kind.__name__}.{name}")
    if name == "format" and ("." in obj or "[" in obj):  # type: ignore[operator]
        raise Unpredictable("a format field that looks attributes up")
    for value in (*args, *kwargs.values()):
        deep(value)
    return getattr(kind, name)(obj, *args, **kwargs)


def item(obj: object, key: object) -> object:
    """``_ab_item_``: ``obj[key]`` on plain data (a dict's keys are compared: checked deeply)."""
    kind = type(obj)
    if kind is dict:
        deep(obj)
        deep(key)
    elif kind not in (list, tuple, str, bytes, range) or type(key) not in (int, bool, slice):
        raise Unpredictable(f"{kind.__name__}[{type(key).__name__}]")
    return obj[key]  # type: ignore[index]


def make_slice(lower: object, upper: object, step: object) -> slice:
    """``_ab_slice_``: the slice of ``a[lower:upper:step]`` (ints or None only)."""
    for bound in (lower, upper, step):
        if bound is not None and type(bound) not in (int, bool):
            raise Unpredictable("a slice bound that is not an int")
    return slice(lower, upper, step)


def concat(*parts: list[Key]) -> list[Key]:
    """``_ab_cat_``: the predictions of a body's call sites, in order."""
    return [key for part in parts for key in part]


def flatten(parts: Iterable[list[Key]]) -> list[Key]:
    """``_ab_flat_``: the predictions of a nested loop's items, in order."""
    return [key for part in parts for key in part]


def unpack(value: object, count: int) -> tuple[object, ...]:
    """An item unpacked into ``count`` loop variables, if it is a plain tuple or list."""
    if type(value) not in (tuple, list) or len(value) != count:  # type: ignore[arg-type]
        raise Unpredictable("an item that does not unpack")
    return tuple(value)  # type: ignore[arg-type]


# --- what can be looked ahead in --------------------------------------------------------


@final
class EnumerateView:
    """``enumerate(seq, start)`` over a sequence, whose items can be read ahead."""

    def __init__(self, seq: Any, start: int) -> None:
        self._seq, self._start = seq, start

    def __iter__(self) -> Iterator[tuple[int, object]]:
        for index, value in enumerate(self._seq):  # the same live iteration as enumerate's
            yield self._start + index, value

    def peek(self, index: int) -> object:
        return (self._start + index, self._seq[index])


@final
class ZipView:
    """``zip(*seqs)`` over sequences, whose items can be read ahead."""

    def __init__(self, seqs: tuple[Any, ...]) -> None:
        self._seqs = seqs

    def __iter__(self) -> Iterator[tuple[object, ...]]:
        return zip(*self._seqs, strict=False)  # zip's own: stop at the shortest

    def peek(self, index: int) -> object:
        return tuple(seq[index] for seq in self._seqs)


_SEQUENCES = (list, tuple, str, bytes, range)
_SNAPSHOTS: tuple[type, ...] = (dict, set, frozenset, type({}.keys()), type({}.values()),
                                type({}.items()))


def view(fn: object, *args: object, **kwargs: object) -> object:
    """``_ab_view_``: ``fn(*args)`` where ``fn`` is ``enumerate`` or ``zip`` in a loop
    header; over sequences, a view whose items can be read ahead (iterating it gives
    exactly what the builtin gives)."""
    if fn is builtins.enumerate and args and type(args[0]) in _SEQUENCES:
        start = kwargs.get("start", args[1] if len(args) > 1 else 0)
        if len(args) <= 2 and set(kwargs) <= {"start"} and type(start) is int:
            return EnumerateView(args[0], start)
    if fn is builtins.zip and args and not kwargs and all(type(a) in _SEQUENCES for a in args):
        return ZipView(args)
    return fn(*args, **kwargs)  # type: ignore[operator]


def _peeker(iterable: object) -> Callable[[int], object] | None:
    """How to read item ``index`` of ``iterable`` ahead of its iteration (:class:`_End`
    past its end), or None when it cannot be read ahead without running code."""
    read: Callable[[int], object]
    if type(iterable) in _SEQUENCES:
        read = cast(Sequence[object], iterable).__getitem__
    elif isinstance(iterable, EnumerateView | ZipView):  # exactly these: they are final
        read = iterable.peek
    elif type(iterable) in _SNAPSHOTS:  # changing these while iterating raises: a copy stays
        read = list(cast(Iterable[object], iterable)).__getitem__
    else:
        return None

    def peek(index: int) -> object:
        try:
            return read(index)
        except IndexError:
            raise _End from None

    return peek


# --- the speculator and its lookaheads --------------------------------------------------


class Lookahead:
    """One loop's predictions, item by item (see the module docstring).

    ``predict(j)`` gives the keys item ``j`` will ask, raises :class:`_End` when
    there is no item ``j`` (yet), or :class:`Unpredictable`.
    """

    def __init__(self, speculator: Speculator, line: int,
                 predict: Callable[[int], list[Key]]) -> None:
        self._speculator = speculator
        self._predict = predict
        self.line = line
        self.loop_id = 0  # given at its first offer
        self.stopped = False
        self._next = 0  # the next item to predict
        self._queue: deque[tuple[int, Key]] = deque()  # predicted, not offered yet
        self._open: dict[int, int] = {}  # item -> its offers not taken yet

    def tick(self, item: int) -> None:
        """Item ``item`` is about to run: check the items before it, offer ahead."""
        if self.stopped:
            return
        if any(done < item for done in self._open):
            self.stop()  # an item ended without the answer predicted for it
            return
        while self._queue and self._queue[0][0] < item:
            self._queue.popleft()
        self._speculator.offer(self, self._fill(item))

    def _fill(self, item: int) -> list[tuple[int, Key]]:
        room = self._speculator.room()
        offers: list[tuple[int, Key]] = []
        while len(offers) < room and not self.stopped:
            if self._queue:
                offers.append(self._queue.popleft())
                continue
            try:  # items one after another: a loop's state is carried from one to the next
                keys = self._predict(self._next)
            except _End:
                break
            except Exception:  # whatever stops a prediction, the loop just runs as written
                self.stopped = True  # keep what is out; predict nothing more
                break
            if self._next >= item:
                self._queue.extend((self._next, key) for key in keys)
            self._next += 1
        return offers

    def opened(self, item: int) -> None:
        self._open[item] = self._open.get(item, 0) + 1

    def used(self, item: int) -> None:
        left = self._open[item] - 1
        if left:
            self._open[item] = left
        else:
            del self._open[item]

    def forget(self) -> None:
        """Its outstanding offers were cancelled."""
        self._open.clear()

    def stop(self) -> None:
        """Predict nothing more and cancel what is outstanding."""
        self.stopped = True
        self._queue.clear()
        self._speculator.cancel(self, end=False)

    def close(self) -> None:
        """The loop is over: cancel what is outstanding and report the loop."""
        self.stopped = True
        self._queue.clear()
        self._speculator.cancel(self, end=True)


class Speculator:
    """A sandbox's speculative sub-queries: offered, outstanding, taken, cancelled.

    ``send`` sends a bridge frame and returns its reply; ``llm_query`` is the
    namespace's (a prediction of a call to it is its key); ``schema_json``
    turns a schema argument into its JSON text, as ``llm_query`` does.
    """

    def __init__(self, send: Send, llm_query: object,
                 schema_json: Callable[[object], str]) -> None:
        self._send = send
        self._llm_query = llm_query
        self._schema_json = schema_json
        self.window = 0
        self._helpers: weakref.WeakKeyDictionary[types.FunctionType, Callable[..., list[Key]]] = (
            weakref.WeakKeyDictionary())
        self._entries: dict[Key, deque[int]] = {}
        self._owners: dict[int, tuple[Lookahead, int, Key]] = {}
        self._live: dict[int, Lookahead] = {}  # loop id -> lookahead that offered
        self._wasted = 0
        self._refused = False
        self._ids = 0
        self._loops = 0
        self._depth = 0  # nested predictions of helper calls

    # --- an execution -----------------------------------------------------------------

    def begin(self, window: int) -> None:
        """An execution starts; ``window`` calls may be outstanding (0: none)."""
        self.window = max(0, window)
        self._wasted = 0
        self._refused = False

    def finish(self) -> None:
        """The execution ends: cancel what is left, report every loop still open."""
        for lookahead in list(self._live.values()):
            self.cancel(lookahead, end=True)
        self.window = 0

    def room(self) -> int:
        if self._refused:
            return 0
        return max(0, self.window - len(self._owners) - self._wasted)

    # --- offers -----------------------------------------------------------------------

    def offer(self, lookahead: Lookahead, offers: list[tuple[int, Key]]) -> None:
        """Send ``offers`` (item, key) of ``lookahead``; keep those the host accepted."""
        fresh = [(item, key) for item, key in offers
                 if not self._in_flight_elsewhere(key, lookahead)]
        while fresh:  # one frame per run of offers with the same schema
            schema = fresh[0][1][2]
            size = next((i for i, (_, key) in enumerate(fresh) if key[2] != schema), len(fresh))
            run, fresh = fresh[:size], fresh[size:]
            if not lookahead.loop_id:
                self._loops += 1
                lookahead.loop_id = self._loops
            ids = list(range(self._ids + 1, self._ids + 1 + len(run)))
            self._ids += len(run)
            extra: dict[str, object] = {"loop": lookahead.loop_id, "line": lookahead.line,
                                        "spec": ids}
            if schema is not None:
                extra["schema"] = schema
            reply = self._send("speculate", [key[0] for _, key in run],
                               [key[1] for _, key in run], **extra)
            value = reply.get("value")
            accepted = value.get("accepted") if isinstance(value, dict) else 0
            accepted = accepted if type(accepted) is int and 0 <= accepted <= len(run) else 0
            self._live[lookahead.loop_id] = lookahead
            for spec, (item, key) in zip(ids[:accepted], run[:accepted], strict=True):
                self._entries.setdefault(key, deque()).append(spec)
                self._owners[spec] = (lookahead, item, key)
                lookahead.opened(item)
            if accepted < len(run):
                self._refused = True  # the host takes no more now (the budget)
                return

    def _in_flight_elsewhere(self, key: Key, lookahead: Lookahead) -> bool:
        """An enclosing loop already offered this prompt (a helper's loop inside it)."""
        return any(self._owners[spec][0] is not lookahead for spec in self._entries.get(key, ()))

    def take(self, key: Key) -> int | None:
        """The id of an outstanding speculative call of ``key``, now used; else None."""
        specs = self._entries.get(key)
        if not specs:
            return None
        spec = specs.popleft()
        if not specs:
            del self._entries[key]
        lookahead, item, _ = self._owners.pop(spec)
        lookahead.used(item)
        return spec

    def cancel(self, lookahead: Lookahead, *, end: bool) -> None:
        """Cancel ``lookahead``'s outstanding calls; ``end``: its loop is over."""
        specs = [spec for spec, owner in self._owners.items() if owner[0] is lookahead]
        for spec in specs:
            key = self._owners.pop(spec)[2]
            self._entries[key].remove(spec)
            if not self._entries[key]:
                del self._entries[key]
        lookahead.forget()
        if not specs and not (end and lookahead.loop_id in self._live):
            return
        self._wasted += len(specs)
        if end:
            self._live.pop(lookahead.loop_id, None)
        if self.window:  # within an execution (a generator may be collected after one)
            self._send("cancel", [], [], loop=lookahead.loop_id, spec=specs, end=end)

    # --- predicting calls -------------------------------------------------------------

    def helper(self, fn: object, predict: Callable[..., list[Key]]) -> object:
        """``_ab_helper_``: remember how to predict what function ``fn`` asks."""
        if type(fn) is types.FunctionType:
            self._helpers[fn] = predict
        return fn

    def is_helper(self, value: object) -> bool:
        return type(value) is types.FunctionType and value in self._helpers

    def predict_call(self, fn: object, args: Callable[[], tuple[object, ...]],
                     kwargs: Callable[[], dict[str, object]]) -> list[Key]:
        """``_ab_predict_call_``: the keys a call of ``fn`` will ask ([] when ``fn`` is
        neither ``llm_query`` nor a helper whose prompts are known)."""
        if fn is self._llm_query:
            return [self.query_key(*args(), **kwargs())]
        if type(fn) is not types.FunctionType:
            return []
        predict = self._helpers.get(fn)
        if predict is None:
            return []
        if self._depth > 8:
            raise Unpredictable("helpers nested too deep")
        self._depth += 1
        try:
            return predict(*args(), **kwargs())
        finally:
            self._depth -= 1

    def predictor_of(self, fn: object) -> Callable[..., list[Key]] | None:
        """How to predict the keys of ``fn(*args, **kwargs)``, if known."""
        if fn is self._llm_query or (type(fn) is types.FunctionType and fn in self._helpers):
            return lambda *args, **kwargs: self.predict_call(fn, lambda: args, lambda: kwargs)
        return None

    def query_key(self, prompt: object, context: object = None, schema: object = None) -> Key:
        """The key of ``llm_query(prompt, context, schema)``: exact strs only."""
        if type(prompt) is not str or not (context is None or type(context) is str):
            raise Unpredictable("not a str prompt")
        return (prompt, context, None if schema is None else self._schema_json(deep(schema)))

    # --- loops ------------------------------------------------------------------------

    def for_items(self, iterable: object, predict: Callable[..., tuple[list[Key], tuple[Any, ...]]],
                  state: Callable[[], tuple[Any, ...]] | None, arity: int, line: int,
                  ) -> Iterator[object]:
        """``_ab_for_``: iterate ``iterable`` exactly as a ``for`` loop would, predicting
        ahead.  ``predict(*item, *state)`` gives an item's keys and the next state."""
        peek = _peeker(iterable) if self.window else None
        if peek is None:
            yield from iterable  # type: ignore[misc]
            return
        states = _start_state(state)
        if states is None:
            yield from iterable  # type: ignore[misc]
            return

        def keys_of(index: int) -> list[Key]:
            value = peek(index)
            values = (value,) if arity == 0 else unpack(value, arity)
            keys, after = predict(*values, *states[-1])
            states.append(after)
            return keys

        yield from self._ticked(iter(iterable), keys_of, line)  # type: ignore[call-overload]

    def while_ticks(self, condition: Callable[[], object],
                    predict: Callable[..., tuple[list[Key], tuple[Any, ...]]],
                    condition_ahead: Callable[..., object] | None,
                    state: Callable[[], tuple[Any, ...]] | None, line: int) -> Iterator[None]:
        """``_ab_while_``: one tick per iteration of ``while condition():``, predicting
        ahead from the loop's state (``condition_ahead(*state)``: does it go on)."""
        def ticks() -> Iterator[None]:
            while condition():
                yield None

        if not self.window:
            yield from ticks()
            return
        states = _start_state(state)
        if states is None:
            yield from ticks()
            return

        def keys_of(index: int) -> list[Key]:
            if index and condition_ahead is not None and not condition_ahead(*states[-1]):
                raise Unpredictable("the loop ends here")
            keys, after = predict(*states[-1])
            states.append(after)
            return keys

        yield from self._ticked(ticks(), keys_of, line)

    def each(self, calls: list[Any], predict: Callable[[Any], list[Key]], line: int = 0
             ) -> Iterator[Any]:
        """Items of ``calls`` (a list that may grow while it is iterated), predicting
        each with ``predict`` (the executor and asyncio stand-ins run calls this way)."""
        def keys_of(index: int) -> list[Key]:
            if index >= len(calls):
                raise _End
            return predict(calls[index])

        if not self.window:
            yield from calls
            return
        yield from self._ticked(iter(calls), keys_of, line)

    def map_items(self, fn: object, iterable: object, line: int) -> Iterator[object]:
        """The items ``map(fn, iterable)`` passes to ``fn``, predicting ahead."""
        predict = self.predictor_of(fn)
        peek = _peeker(iterable) if self.window and predict is not None else None
        if peek is None or predict is None:
            yield from iterable  # type: ignore[misc]
            return

        def keys_of(index: int) -> list[Key]:
            return predict(peek(index))

        yield from self._ticked(iter(iterable), keys_of, line)  # type: ignore[call-overload]

    def _ticked(self, items: Iterator[Any], keys_of: Callable[[int], list[Key]], line: int
                ) -> Iterator[Any]:
        lookahead = Lookahead(self, line, keys_of)
        try:
            for index, value in enumerate(items):
                lookahead.tick(index)
                yield value
        finally:
            lookahead.close()


def _start_state(state: Callable[[], tuple[Any, ...]] | None) -> list[tuple[Any, ...]] | None:
    """The loop's state before its first item (its variables' values), or None when a
    variable is not bound yet: then nothing is predicted."""
    if state is None:
        return [()]
    try:
        return [state()]
    except NameError:
        return None


def guard_names(speculator: Speculator) -> dict[str, object]:
    """The namespace names that generated code calls (see :mod:`rlm_sandbox.autobatch`)."""
    return {
        "_ab_v_": shallow, "_ab_deep_": deep, "_ab_call_": call, "_ab_method_": method,
        "_ab_item_": item, "_ab_slice_": make_slice, "_ab_cat_": concat, "_ab_flat_": flatten,
        "_ab_view_": view, "_ab_for_": speculator.for_items, "_ab_while_": speculator.while_ticks,
        "_ab_map_": lambda fn, func, iterable, line: (
            fn(func, speculator.map_items(func, iterable, line)) if fn is builtins.map
            else fn(func, iterable)),
        "_ab_helper_": speculator.helper, "_ab_predict_call_": speculator.predict_call,
    }
