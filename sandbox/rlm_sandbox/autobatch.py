"""Auto-batching at compile time: which loops' sub-queries can be predicted, and how.

:func:`rewrite` runs on a block's syntax tree before the policy's transformer
(which then checks and guards everything, generated code included).  For each
loop whose body calls ``llm_query`` (or a helper function known to call it,
``def ask(c): return llm_query(...)``) with arguments computed only from the
loop's items, from values the loop does not change, and from plain
assignments earlier in the body, it generates a *predictor*: a lambda that,
given an item (and the loop's carried state, such as a ``while`` loop's
index), returns the keys (prompt, context, schema) the body will ask, and the
state after the item.  The loop then iterates through
:mod:`rlm_sandbox.speculation`, which calls the predictor ahead of the body.

The loop itself is unchanged: its header gets ``_ab_for_(<iterable>,
<predictor>, ...)`` (a ``while`` loop becomes ``for _ab_tick_ in
_ab_while_(lambda: <condition>, ...)``).  A comprehension's first iterable,
``map(f, xs)``'s ``xs``, and functions and lambdas whose prompts are known
(registered with ``_ab_helper_``) are handled the same way.

Predictors are built only from the expressions listed in :meth:`_Body._pure`
(names, constants, f-strings, operators, subscripts and slices, comprehensions,
calls of a few builtins and non-mutating str/list/dict methods), each read
through a guard that refuses anything but plain data.  Anything else in an
argument, a condition that depends on an answer, a name the loop changes in a
way that cannot be followed: that call site is not predicted.  A loop with no
predicted call site is left exactly as it was.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass

__all__ = ["GENERATED", "is_generated", "rewrite"]

#: Set on the Name nodes this module makes, whose policy names (``_ab_for_`` ...) model
#: code itself may not use: the transformer lets exactly those through.
GENERATED = "rlm_generated"

#: Builtins a predictor may call (the guard checks, when it runs, that the name is them).
PURE_BUILTINS = frozenset({
    "abs", "ascii", "bin", "bool", "chr", "dict", "enumerate", "float", "format", "hex",
    "int", "len", "list", "max", "min", "oct", "ord", "range", "repr", "reversed", "round",
    "set", "sorted", "str", "sum", "tuple", "zip",
})
#: Methods a predictor may call (the guard checks the receiver's type when it runs).
PURE_METHODS = frozenset({
    "capitalize", "casefold", "center", "copy", "count", "decode", "encode", "endswith",
    "expandtabs", "find", "format", "get", "index", "isalnum", "isalpha", "isdigit",
    "islower", "isnumeric", "isspace", "istitle", "isupper", "items", "join", "keys",
    "ljust", "lower", "lstrip", "partition", "removeprefix", "removesuffix", "replace",
    "rfind", "rindex", "rjust", "rpartition", "rsplit", "rstrip", "split", "splitlines",
    "startswith", "strip", "swapcase", "title", "upper", "values", "zfill",
})
#: Calls that change none of their arguments (a name passed to any other call may change).
_KEEPS_ARGUMENTS = PURE_BUILTINS | {"print", "isinstance", "llm_query", "any", "all"}
#: Statements :meth:`_Body.statement` follows; any other poisons every name it changes.
_SIMULATED = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr, ast.If, ast.For, ast.Try,
              ast.With, ast.Return, ast.Raise, ast.Continue, ast.Break, ast.Pass)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def is_generated(node: ast.AST) -> bool:
    return getattr(node, GENERATED, False) is True


def rewrite(tree: ast.Module, helpers: frozenset[str] = frozenset()) -> ast.Module:
    """Rewrite ``tree`` in place so its predictable loops look ahead; return it.

    ``helpers``: names that, in the namespace, are bound to functions whose
    prompts are known (defined by earlier blocks).
    """
    if not _names_a_sub_query(tree, helpers):
        return tree  # no call site to predict: the planner's walks would find none
    _Rewriter(_Planner(tree, helpers)).visit(tree)
    return ast.fix_missing_locations(tree)


def _names_a_sub_query(tree: ast.Module, helpers: frozenset[str]) -> bool:
    """Whether ``tree`` names ``llm_query`` or a known helper anywhere: every call site
    the planner predicts (a call, ``map``'s function, a helper defined here) names one."""
    asks = helpers | {"llm_query"}
    return any(isinstance(node, ast.Name) and node.id in asks for node in ast.walk(tree))


# --- building generated code -------------------------------------------------------------


def _gen(name: str, store: bool = False) -> ast.Name:
    node = ast.Name(name, ast.Store() if store else ast.Load())
    setattr(node, GENERATED, True)
    return node


def _call(name: str, *args: ast.expr, keywords: list[ast.keyword] | None = None) -> ast.Call:
    return ast.Call(_gen(name), list(args), keywords or [])


def _lambda(params: Iterable[str], body: ast.expr) -> ast.Lambda:
    arguments = ast.arguments(posonlyargs=[], args=[ast.arg(p) for p in params], vararg=None,
                              kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])
    return ast.Lambda(arguments, body)


def _cat(parts: list[Value]) -> ast.expr:
    return _call("_ab_cat_", *[part.expr for part in parts])


@dataclass(frozen=True, slots=True)
class Value:
    """A generated expression, and the variables whose value at the start of the item
    it reads (a loop's carried state)."""

    expr: ast.expr
    reads: frozenset[str] = frozenset()


# --- what a body changes -----------------------------------------------------------------


def _walk_here(node: ast.AST) -> Iterator[ast.AST]:
    """``node`` and everything under it, not entering function or class bodies."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        for child in ast.iter_child_nodes(current):
            if isinstance(child, _SCOPES):
                yield child  # its name is bound here; its body is not run here
            else:
                stack.append(child)


def _base_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute | ast.Subscript | ast.Starred):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def changed_names(nodes: Iterable[ast.AST], *, in_place_only: bool = False,
                  keeps: Collection[str] = ()) -> set[str]:
    """Names that ``nodes`` bind, delete or may change in place (conservatively);
    ``in_place_only``: only those changed in place (``xs.append(v)``, ``d[k] = v``, passed
    to a function that might change them).  Functions named in ``keeps`` change none of
    their arguments."""
    names: set[str] = set()
    for top in nodes:
        for node in _walk_here(top):
            if isinstance(node, ast.Attribute | ast.Subscript) and not isinstance(
                    node.ctx, ast.Load):
                names.add(_base_name(node) or "")
            elif isinstance(node, ast.Call):
                names |= _changed_by_call(node, keeps)
            elif in_place_only:
                continue
            elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                names.add(node.id)
            elif isinstance(node, _SCOPES) and not isinstance(node, ast.Lambda):
                names.add(node.name)
            elif isinstance(node, ast.alias):
                names.add((node.asname or node.name).partition(".")[0])
            elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and (
                    node.name):
                names.add(node.name)
            elif isinstance(node, ast.MatchMapping) and node.rest:
                names.add(node.rest)
    names.discard("")
    return names


def _changed_by_call(node: ast.Call, keeps: Collection[str]) -> set[str]:
    names: set[str] = set()
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr not in PURE_METHODS:
        names.add(_base_name(func.value) or "")
    if not (isinstance(func, ast.Name) and (func.id in _KEEPS_ARGUMENTS or func.id in keeps)
            ) and not (isinstance(func, ast.Attribute) and func.attr in PURE_METHODS):
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            names.add(_base_name(arg) or "")
    return names


def _contains(nodes: Iterable[ast.AST], kinds: tuple[type, ...], *, scoped: bool = True) -> bool:
    """Whether ``nodes`` hold a node of ``kinds`` (``scoped``: not inside a function)."""
    walk = _walk_here if scoped else ast.walk
    return any(isinstance(node, kinds) for top in nodes for node in walk(top))


def _loop_level(body: list[ast.stmt]) -> Iterator[ast.AST]:
    """The nodes of a loop's body that belong to it, not to loops or functions inside."""
    stack: list[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (*_SCOPES, ast.For, ast.While, ast.AsyncFor)):
            stack.extend(ast.iter_child_nodes(node))
        elif isinstance(node, ast.For | ast.While | ast.AsyncFor):
            stack.extend(node.orelse)  # an inner loop's else belongs to this level


# --- simulating a body -------------------------------------------------------------------

_MISSING = Value(ast.Constant(None))


class _Body:
    """One pass over a body's statements, as one item would run them.

    ``env`` maps a name assigned so far to its value (None: not predictable);
    ``bound`` names are the predictor's parameters; a ``variant`` name not
    assigned yet is read as its value at the start of the item (the loop's
    state).  ``parts`` are the predicted call sites, in order; ``guards``
    conditions under which the rest of the body does not run (``if x: continue``).
    """

    def __init__(self, planner: _Planner, bound: set[str], variant: set[str],
                 env: dict[str, Value | None] | None = None) -> None:
        self.planner = planner
        self.bound = bound
        self.variant = variant
        self.env: dict[str, Value | None] = dict(env or {})
        self.parts: list[Value] = []
        self.guards: list[Value] = []

    def branch(self) -> _Body:
        return _Body(self.planner, self.bound, self.variant, self.env)

    # --- statements -------------------------------------------------------------------

    def run(self, body: list[ast.stmt]) -> bool:
        """Simulate ``body``; True when it always leaves (continue, break, return, raise)."""
        for stmt in body:
            handled = isinstance(stmt, _SIMULATED)
            leaves = self.statement(stmt) if handled else False
            # What the statement changed in place (or, unsimulated, at all) is unknown now.
            for name in self.planner.changed([stmt], in_place_only=handled):
                self.env[name] = None
            if leaves:
                return True
        return False

    def statement(self, stmt: ast.stmt) -> bool:
        if isinstance(stmt, ast.Assign):
            self.sites(stmt.value)
            for target in stmt.targets:
                self.assign(target, stmt.value)
        elif isinstance(stmt, ast.AnnAssign):
            if stmt.value is not None:
                self.sites(stmt.value)
                self.assign(stmt.target, stmt.value)
        elif isinstance(stmt, ast.AugAssign):
            self.sites(stmt.value)
            if isinstance(stmt.target, ast.Name):
                name = stmt.target.id
                self.env[name] = self.pure(ast.BinOp(ast.Name(name, ast.Load()), stmt.op,
                                                     stmt.value))
        elif isinstance(stmt, ast.Expr):
            self.sites(stmt.value)
        elif isinstance(stmt, ast.If):
            return self.if_statement(stmt)
        elif isinstance(stmt, ast.For):
            self.inner_loop(stmt)
        elif isinstance(stmt, ast.Try):
            if self.run(stmt.body):
                return True
            for name in self.planner.changed([*stmt.handlers, *stmt.orelse]):
                self.env[name] = None
            return self.run(stmt.finalbody)
        elif isinstance(stmt, ast.With):
            for item in stmt.items:
                self.sites(item.context_expr)
            return self.run(stmt.body)
        elif isinstance(stmt, ast.Return | ast.Raise):
            value = stmt.value if isinstance(stmt, ast.Return) else stmt.exc
            if value is not None:
                self.sites(value)
            return True
        elif isinstance(stmt, ast.Continue | ast.Break):
            return True
        return False

    def assign(self, target: ast.expr, value: ast.expr) -> None:
        if isinstance(target, ast.Name):
            self.env[target.id] = self.pure(value)
        elif isinstance(target, ast.Tuple | ast.List) and isinstance(
                value, ast.Tuple | ast.List) and len(target.elts) == len(value.elts) and not (
                _contains([target, value], (ast.Starred,), scoped=False)):
            values = [self.pure(v) for v in value.elts]  # all read before any is bound
            for element, pure in zip(target.elts, values, strict=True):
                if isinstance(element, ast.Name):
                    self.env[element.id] = pure
        # Any other target: changed_names() poisons what it names.

    def if_statement(self, stmt: ast.If) -> bool:
        self.sites(stmt.test)
        test = self.pure(stmt.test)
        then, other = self.branch(), self.branch()
        then_leaves, other_leaves = then.run(stmt.body), other.run(stmt.orelse)
        if test is not None and (then.parts or other.parts):
            self.add(Value(ast.IfExp(test.expr, _cat(then.parts), _cat(other.parts)),
                           test.reads | _reads(then.parts) | _reads(other.parts)))
        if test is not None and then_leaves and other_leaves:
            return True
        if test is not None and then_leaves:
            self.guards.append(test)  # the rest runs only when the test is false
            self.env = other.env
            return False
        if test is not None and other_leaves:
            self.guards.append(Value(ast.UnaryOp(ast.Not(), test.expr), test.reads))
            self.env = then.env
            return False
        for name in set(then.env) | set(other.env):
            a, b = then.env.get(name, _MISSING), other.env.get(name, _MISSING)
            if a is b:
                continue  # neither branch assigned it
            if test is None or a is None or b is None or a is _MISSING or b is _MISSING:
                self.env[name] = None
            else:
                self.env[name] = Value(ast.IfExp(copy.deepcopy(test.expr), a.expr, b.expr),
                                       test.reads | a.reads | b.reads)
        return False

    def inner_loop(self, stmt: ast.For) -> None:
        """A ``for`` inside the body: its items' call sites become one part (unless it may
        break: then its own lookahead predicts it)."""
        self.sites(stmt.iter)
        iterable = self.pure(stmt.iter)
        targets = _targets(stmt.target)
        inner_changed = self.planner.changed([*stmt.body, stmt.target])
        if iterable is not None and targets is not None and not any(
                isinstance(node, ast.Break) for node in _loop_level(stmt.body)):
            env = {**self.env, **dict.fromkeys(inner_changed - set(targets[0]))}
            for name in targets[0]:
                env.pop(name, None)
            inner = _Body(self.planner, self.bound | set(targets[0]),
                          self.variant | inner_changed, env)
            inner.run(stmt.body)
            if inner.parts:
                loop = ast.ListComp(_cat(inner.parts), [ast.comprehension(
                    copy.deepcopy(stmt.target), iterable.expr, [], 0)])
                self.add(Value(_call("_ab_flat_", loop), iterable.reads | _reads(inner.parts)))
        for name in inner_changed | self.planner.changed(stmt.orelse):
            self.env[name] = None

    # --- call sites -------------------------------------------------------------------

    def add(self, part: Value) -> None:
        if self.guards:
            skip = ast.BoolOp(ast.Or(), [g.expr for g in self.guards]) if len(
                self.guards) > 1 else self.guards[0].expr
            part = Value(ast.IfExp(copy.deepcopy(skip), _cat([]), part.expr),
                         part.reads | _reads(self.guards))
        self.parts.append(part)

    def sites(self, node: ast.expr) -> None:
        """Add the predictable call sites in ``node`` (those that surely run)."""
        if isinstance(node, _SCOPES):
            return
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and (
                node.func.id in self.planner.candidates):
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                self.sites(arg)
            site = self.site(node)
            if site is not None:
                self.add(site)
            return
        if isinstance(node, ast.IfExp):
            self.sites(node.test)
            test = self.pure(node.test)
            if test is not None:
                then, other = self.branch(), self.branch()
                then.sites(node.body)
                other.sites(node.orelse)
                if then.parts or other.parts:
                    self.add(Value(ast.IfExp(test.expr, _cat(then.parts), _cat(other.parts)),
                                   test.reads | _reads(then.parts) | _reads(other.parts)))
            return
        if isinstance(node, ast.BoolOp):
            self.sites(node.values[0])  # the others may not run
            return
        if isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
            self.comprehension(node)
            return
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.keyword):
                self.sites(child.value)
            elif isinstance(child, ast.expr):
                self.sites(child)

    def site(self, node: ast.Call) -> Value | None:
        if any(isinstance(a, ast.Starred) for a in node.args) or any(
                k.arg is None for k in node.keywords):
            return None
        args = [self.pure(a) for a in node.args]
        kwargs = [self.pure(k.value) for k in node.keywords]
        if any(v is None for v in [*args, *kwargs]):
            return None
        assert isinstance(node.func, ast.Name)
        positional = ast.Tuple([v.expr for v in args if v is not None], ast.Load())
        names: list[ast.expr | None] = [ast.Constant(k.arg) for k in node.keywords]
        named = ast.Dict(names, [v.expr for v in kwargs if v is not None])
        call = _call("_ab_predict_call_", ast.Name(node.func.id, ast.Load()),
                     _lambda([], positional), _lambda([], named))
        return Value(call, _reads([v for v in [*args, *kwargs] if v is not None]))

    def comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp
                      ) -> None:
        """A comprehension in the body: simulated as the loops it stands for."""
        loops = _comprehension_loops(node)
        if loops is not None:
            self.inner_loop(loops)

    # --- pure expressions -------------------------------------------------------------

    def pure(self, node: ast.expr) -> Value | None:
        """``node`` as guarded predictor code, or None if it cannot be predicted."""
        reads: set[str] = set()
        expr = self._pure(node, reads, frozenset())
        return None if expr is None else Value(expr, frozenset(reads))

    def _pure(self, node: ast.expr, reads: set[str], local: frozenset[str]) -> ast.expr | None:
        def sub(child: ast.expr, deep: bool = False) -> ast.expr | None:
            expr = self._pure(child, reads, local)
            return None if expr is None else (_call("_ab_deep_", expr) if deep else expr)

        def subs(children: list[ast.expr], deep: bool = False) -> list[ast.expr] | None:
            done = [sub(child, deep) for child in children]
            return None if any(d is None for d in done) else done  # type: ignore[return-value]

        if isinstance(node, ast.Constant):
            return ast.Constant(node.value)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            return self._name(node.id, reads, local)
        if isinstance(node, ast.JoinedStr):
            values = subs(node.values)
            return None if values is None else ast.JoinedStr(values)
        if isinstance(node, ast.FormattedValue):
            value = sub(node.value, deep=True)
            spec = None if node.format_spec is None else sub(node.format_spec)
            if value is None or (node.format_spec is not None and spec is None):
                return None
            return ast.FormattedValue(value, node.conversion, spec)
        if isinstance(node, ast.BinOp):
            deep = isinstance(node.op, ast.Mod)  # "%s" % x formats x
            left, right = sub(node.left, deep), sub(node.right, deep)
            return None if left is None or right is None else ast.BinOp(left, node.op, right)
        if isinstance(node, ast.UnaryOp):
            operand = sub(node.operand)
            return None if operand is None else ast.UnaryOp(node.op, operand)
        if isinstance(node, ast.BoolOp):
            values = subs(node.values)
            return None if values is None else ast.BoolOp(node.op, values)
        if isinstance(node, ast.Compare):
            left, rest = sub(node.left, deep=True), subs(node.comparators, deep=True)
            return None if left is None or rest is None else ast.Compare(left, node.ops, rest)
        if isinstance(node, ast.IfExp):
            parts = subs([node.test, node.body, node.orelse])
            return None if parts is None else ast.IfExp(*parts)
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            return self._subscript(node, sub)
        if isinstance(node, ast.Tuple | ast.List) and isinstance(node.ctx, ast.Load):
            elements = subs(node.elts)
            return None if elements is None else type(node)(elements, ast.Load())
        if isinstance(node, ast.Dict) and all(key is not None for key in node.keys):
            keys, values = subs(node.keys), subs(node.values)  # type: ignore[arg-type]
            if keys is None or values is None:
                return None
            return ast.Dict(list[ast.expr | None](keys), values)
        if isinstance(node, ast.Call):
            return self._pure_call(node, sub, local)
        if isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp):
            return self._pure_comprehension(node, reads, local)
        return None

    def _name(self, name: str, reads: set[str], local: frozenset[str]) -> ast.expr | None:
        if name in local or name in self.bound:
            return _call("_ab_v_", ast.Name(name, ast.Load()))
        if name in self.env:
            value = self.env[name]
            if value is None:
                return None
            reads |= value.reads
            return copy.deepcopy(value.expr)
        if name in self.variant:
            reads.add(name)  # its value when the item starts: the loop's state
        return _call("_ab_v_", ast.Name(name, ast.Load()))

    def _subscript(self, node: ast.Subscript,
                   sub: Callable[[ast.expr], ast.expr | None]) -> ast.expr | None:
        value = sub(node.value)
        index: ast.expr | None
        if isinstance(node.slice, ast.Slice):
            bounds = [ast.Constant(None) if b is None else sub(b)
                      for b in (node.slice.lower, node.slice.upper, node.slice.step)]
            index = None if any(b is None for b in bounds) else _call(
                "_ab_slice_", *bounds)  # type: ignore[arg-type]
        else:
            index = sub(node.slice)
        return None if value is None or index is None else _call("_ab_item_", value, index)

    def _pure_call(self, node: ast.Call, sub: Callable[[ast.expr], ast.expr | None],
                   local: frozenset[str]) -> ast.expr | None:
        if any(isinstance(a, ast.Starred) for a in node.args) or any(
                k.arg is None for k in node.keywords):
            return None
        args = [sub(a) for a in node.args]
        values = [sub(k.value) for k in node.keywords]
        if any(a is None for a in [*args, *values]):
            return None
        keywords = [ast.keyword(k.arg, v) for k, v in zip(node.keywords, values, strict=True)
                    if v is not None]
        func = node.func
        shadowed = local | self.bound | set(self.env) | self.variant
        if isinstance(func, ast.Name) and func.id in PURE_BUILTINS and func.id not in shadowed:
            return _call("_ab_call_", ast.Name(func.id, ast.Load()), *args,  # type: ignore[arg-type]
                         keywords=keywords)
        if isinstance(func, ast.Attribute) and func.attr in PURE_METHODS:
            receiver = sub(func.value)
            if receiver is not None:
                return _call("_ab_method_", receiver, ast.Constant(func.attr),
                             *args, keywords=keywords)  # type: ignore[arg-type]
        return None

    def _pure_comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp,
                            reads: set[str], local: frozenset[str]) -> ast.expr | None:
        generators: list[ast.comprehension] = []
        for generator in node.generators:
            targets = _targets(generator.target)
            if targets is None or generator.is_async:
                return None
            iterable = self._pure(generator.iter, reads, local)
            local = local | set(targets[0])
            ifs = [self._pure(test, reads, local) for test in generator.ifs]
            if iterable is None or any(test is None for test in ifs):
                return None
            generators.append(ast.comprehension(copy.deepcopy(generator.target), iterable,
                                                ifs, 0))  # type: ignore[arg-type]
        element = self._pure(node.elt, reads, local)
        return None if element is None else type(node)(element, generators)


def _reads(values: Iterable[Value]) -> frozenset[str]:
    return frozenset().union(*(value.reads for value in values))


def _targets(target: ast.expr) -> tuple[list[str], int] | None:
    """A loop target's names and how many an item unpacks into (0: the item itself)."""
    if isinstance(target, ast.Name):
        return [target.id], 0
    if isinstance(target, ast.Tuple | ast.List) and target.elts and all(
            isinstance(e, ast.Name) for e in target.elts):
        names = [e.id for e in target.elts]  # type: ignore[attr-defined]
        return (names, len(names)) if len(set(names)) == len(names) else None
    return None


def _comprehension_loops(node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp
                         ) -> ast.For | None:
    """The ``for`` statements a comprehension stands for, its element as their body."""
    if any(g.is_async for g in node.generators) or _contains([node], (ast.NamedExpr,
                                                                     ast.Await)):
        return None
    element: ast.expr = ast.Tuple([node.key, node.value], ast.Load()) if isinstance(
        node, ast.DictComp) else node.elt
    body: list[ast.stmt] = [ast.Expr(element)]
    loop: ast.For | None = None
    for generator in reversed(node.generators):
        if generator.ifs:
            test = generator.ifs[0] if len(generator.ifs) == 1 else ast.BoolOp(
                ast.And(), generator.ifs)
            body = [ast.If(test, body, [])]
        loop = ast.copy_location(ast.For(generator.target, generator.iter, body, []), node)
        body = [loop]
    return loop


# --- plans -------------------------------------------------------------------------------


class _Planner:
    """What the whole block tells every plan: candidate callees, names changed from afar."""

    def __init__(self, tree: ast.Module, helpers: frozenset[str]) -> None:
        #: Names a function may rebind when called (``global``/``nonlocal``).
        self.changed_from_afar = {name for node in ast.walk(tree)
                                  if isinstance(node, ast.Global | ast.Nonlocal)
                                  for name in node.names}
        #: Callees whose prompts can be predicted: llm_query, and helpers that call it (or
        #: call other helpers), found by repeating until no more turn up.
        self.candidates = {"llm_query"} | set(helpers)
        defs = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
                and not node.decorator_list]
        grew = True
        while grew:
            found = {d.name for d in defs if d.name not in self.candidates
                     and self.helper(d.args, d.body) is not None}
            self.candidates |= found
            grew = bool(found)

    def changed(self, nodes: Iterable[ast.AST], *, in_place_only: bool = False) -> set[str]:
        """:func:`changed_names`, knowing that the candidates change no argument."""
        return changed_names(nodes, in_place_only=in_place_only, keeps=self.candidates)

    def loop(self, node: ast.For) -> Callable[[ast.expr], ast.expr] | None:
        """How to wrap a ``for`` loop's (visited) iterable, or None to leave it."""
        targets = _targets(node.target)
        if targets is None:
            return None
        names, arity = targets
        variant = (self.changed(node.body) | self.changed_from_afar) - set(names)
        body = _Body(self, set(names), variant)
        body.run(node.body)
        state = _state(body, _reads(body.parts))
        if not body.parts or state is None:
            return None
        predictor = _lambda([*names, *state[0]], ast.Tuple(
            [_cat(body.parts), ast.Tuple(state[1], ast.Load())], ast.Load()))
        thunk = _state_thunk(state[0])
        line = ast.Constant(node.lineno)

        def wrap(iterable: ast.expr) -> ast.expr:
            return _call("_ab_for_", _viewed(iterable), predictor, thunk, ast.Constant(arity),
                         line)

        return wrap

    def while_loop(self, node: ast.While) -> ast.For | None:
        """The ``for`` over ticks a ``while`` loop becomes, or None to leave it."""
        if any(isinstance(n, ast.Continue) for n in _loop_level(node.body)) or _contains(
                [node.test], (ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom)):
            return None
        variant = self.changed(node.body) | self.changed_from_afar
        start = _Body(self, set(), variant)
        body = _Body(self, set(), variant)
        body.run(node.body)
        if not body.parts:
            return None
        conjuncts = node.test.values if isinstance(node.test, ast.BoolOp) and isinstance(
            node.test.op, ast.And) else [node.test]
        kept = [c for c in (start.pure(t) for t in conjuncts)
                if c is not None and _state(body, c.reads) is not None]
        condition = None if not kept else Value(
            kept[0].expr if len(kept) == 1 else ast.BoolOp(ast.And(), [c.expr for c in kept]),
            _reads(kept))
        state = _state(body, _reads(body.parts) | (condition.reads if condition else set()))
        if state is None:
            return None
        predictor = _lambda(state[0], ast.Tuple(
            [_cat(body.parts), ast.Tuple(state[1], ast.Load())], ast.Load()))
        ahead = ast.Constant(None) if condition is None else _lambda(state[0], condition.expr)
        ticks = _call("_ab_while_", _lambda([], node.test), predictor, ahead,
                      _state_thunk(state[0]), ast.Constant(node.lineno))
        return ast.For(_gen("_ab_tick_", store=True), ticks, node.body, node.orelse)

    def helper(self, args: ast.arguments, body: list[ast.stmt]) -> ast.Lambda | None:
        """The predictor of a function (or lambda) whose prompts are known, or None."""
        if args.posonlyargs or args.vararg or args.kwonlyargs or args.kwarg or args.defaults:
            return None
        if _contains(body, (ast.Yield, ast.YieldFrom, ast.Await)):
            return None  # calling it does not run its body
        params = [arg.arg for arg in args.args]
        if self.changed(body, in_place_only=True) & set(params):
            return None  # it changes an argument: a loop passing it its data would change
        local = self.changed(body) - set(params)
        simulated = _Body(self, set(params), self.changed_from_afar | self.changed(body),
                          dict.fromkeys(local))
        simulated.run(body)
        parts = [part for part in simulated.parts if not part.reads]
        return _lambda(params, _cat(parts)) if parts else None


def _state(body: _Body, reads: Iterable[str]) -> tuple[list[str], list[ast.expr]] | None:
    """The loop's carried variables and their values after an item, or None when one of
    them cannot be followed (assigned from an answer, changed in place ...)."""
    todo, after = set(reads), dict[str, ast.expr]()
    while todo:
        name = todo.pop()
        value = body.env.get(name, _MISSING)
        if value is None or value is _MISSING:
            return None
        after[name] = value.expr
        todo |= value.reads - set(after)
    names = sorted(after)
    return names, [copy.deepcopy(after[name]) for name in names]


def _state_thunk(names: list[str]) -> ast.expr:
    if not names:
        return ast.Constant(None)
    return _lambda([], ast.Tuple([ast.Name(n, ast.Load()) for n in names], ast.Load()))


def _viewed(iterable: ast.expr) -> ast.expr:
    """``enumerate(xs)``/``zip(xs, ys)`` in a loop header, made readable ahead."""
    if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) and (
            iterable.func.id in ("enumerate", "zip")):
        return ast.Call(_gen("_ab_view_"), [iterable.func, *iterable.args], iterable.keywords)
    return iterable


# --- the rewriter ------------------------------------------------------------------------


class _Rewriter(ast.NodeTransformer):
    """Applies the plans; each node is planned as the model wrote it, then its children
    are rewritten, then the generated code is attached (and never visited again)."""

    def __init__(self, planner: _Planner) -> None:
        self.planner = planner

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        # A class body's own statements see its names, which a lambda would not: only its
        # methods are looked at.
        node.body = [self.visit(s) if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef)
                     else s for s in node.body]
        return node

    def visit_For(self, node: ast.For) -> ast.AST:
        wrap = self.planner.loop(node)
        self.generic_visit(node)
        if wrap is not None:
            node.iter = ast.copy_location(wrap(node.iter), node.iter)
        return node

    def visit_While(self, node: ast.While) -> ast.AST:
        loop = self.planner.while_loop(node)
        self.generic_visit(node)
        if loop is None:
            return node
        loop.iter.args[0] = _lambda([], node.test)  # type: ignore[attr-defined]
        loop.body, loop.orelse = node.body, node.orelse
        return ast.copy_location(loop, node)

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp
                       ) -> ast.AST:
        loops = _comprehension_loops(node)
        wrap = None if loops is None else self.planner.loop(loops)
        self.generic_visit(node)
        if wrap is not None:
            first = node.generators[0]
            first.iter = ast.copy_location(wrap(first.iter), first.iter)
        return node

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _comprehension

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        func = node.func
        if isinstance(func, ast.Name) and func.id == "map" and len(node.args) == 2 and not (
                node.keywords or any(isinstance(a, ast.Starred) for a in node.args)):
            return ast.copy_location(
                _call("_ab_map_", func, *node.args, ast.Constant(node.lineno)), node)
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST | list[ast.AST]:
        predictor = None if node.decorator_list else self.planner.helper(node.args, node.body)
        self.generic_visit(node)
        if predictor is None:
            return node
        register = ast.Expr(_call("_ab_helper_", ast.Name(node.name, ast.Load()), predictor))
        return [node, ast.copy_location(register, node)]

    def visit_Lambda(self, node: ast.Lambda) -> ast.AST:
        predictor = self.planner.helper(node.args, [ast.Return(node.body)])
        self.generic_visit(node)
        if predictor is None:
            return node
        return ast.copy_location(_call("_ab_helper_", node, predictor), node)
