"""Compiling model code: RestrictedPython's transformer with the sandbox's rules (which
names and attributes model code may write, the guards it is routed through), and the
loop rewrite of auto-batching.  The guards themselves run in :mod:`rlm_sandbox.policy`.
"""

from __future__ import annotations

import ast
import re
import types
from collections.abc import Iterable
from typing import Any

from RestrictedPython.compile import compile_restricted_exec
from RestrictedPython.transformer import (
    FORBIDDEN_FUNC_NAMES,
    INSPECT_ATTRIBUTES,
    IOPERATOR_TO_STR,
    RestrictingNodeTransformer,
    copy_locations,
)

from rlm_sandbox.autobatch import is_generated, rewrite
from rlm_sandbox.classes import (
    DEFINABLE_DUNDERS,
    READABLE_DUNDERS,
)

__all__ = ["REPL_FILENAME", "SandboxTransformer", "compile_code", "is_model_name"]

REPL_FILENAME = "<repl>"


# --- compilation ---------------------------------------------------------------------------


_POLICY_NAME = re.compile(r"__.*|_.*_|_print|_tmp\d+")
_INTROSPECTION_PREFIXES = ("gi_", "cr_", "ag_", "f_", "tb_", "co_")


def is_model_name(name: str) -> bool:
    """May model code bind (and read) this name?  ``_helper`` yes; ``_getattr_`` no."""
    if not name.startswith("_") or name == "_" or name in DEFINABLE_DUNDERS:
        return True
    return _POLICY_NAME.fullmatch(name) is None


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _pattern_attribute_refusal(name: str) -> str | None:
    """Why a class pattern may not read ``name`` (Python reads it without any guard)."""
    if name.startswith("_") or name in INSPECT_ATTRIBUTES or name == "obj" or name.startswith(
            _INTROSPECTION_PREFIXES):
        return f'"{name}" cannot be matched as an attribute in the sandbox; read it in the body'
    return None


class SandboxTransformer(RestrictingNodeTransformer):
    """RestrictedPython's transformer, widened to ordinary Python.

    Added: private names of the model's own, magic method definitions,
    dunder reads of magic methods, ``if __name__ == "__main__":``,
    annotations, ``nonlocal``, ``match``, and augmented assignment to
    attributes and items.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._match_count = 0
        self._held: list[tuple[str, list[ast.expr]]] = []

    def check_name(self, node: Any, name: str | None, allow_magic_methods: bool = False) -> None:
        if name is None:
            return
        if not is_model_name(name):
            self.error(node, f'"{name}" is an invalid name: names starting with "__" or of the '
                             'form "_x_" belong to the sandbox')
        elif name.endswith("__roles__"):
            self.error(node, f'"{name}" is an invalid name because it ends with "__roles__".')
        elif name in FORBIDDEN_FUNC_NAMES:
            self.error(node, f'"{name}" is a reserved name.')

    def visit_Name(self, node: ast.Name) -> ast.AST | Iterable[ast.AST] | None:
        if is_generated(node):
            return node  # a policy name the auto-batching rewrite put there (autobatch.py)
        if node.id == "__name__" and isinstance(node.ctx, ast.Load):
            return node  # `if __name__ == "__main__":` reads the namespace's "__main__"
        return super().visit_Name(node)

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST | Iterable[ast.AST] | None:
        attr = node.attr
        if not attr.startswith("_") or attr == "_":
            return super().visit_Attribute(node)
        loading = isinstance(node.ctx, ast.Load)
        if _is_dunder(attr) and not (loading and attr in READABLE_DUNDERS):
            self.error(node, f'"{attr}" is not accessible in the sandbox: of the dunder '
                             "attributes only magic methods, __name__, __qualname__, __doc__ "
                             "and __class__ can be read, and none can be assigned")
        elif attr.startswith("__") and not _is_dunder(attr):
            self.error(node, f'"{attr}" is an invalid attribute name: use one underscore '
                             "for private attributes in the sandbox")
        # The guard decides at run time whose private attributes may be read.
        node = self.node_contents_visit(node)
        if loading:
            call = ast.Call(ast.Name("_getattr_", ast.Load()), [node.value, ast.Constant(attr)],
                            [])
            copy_locations(call, node)
            return call
        # `obj._x = v` must name the model's own object, not just a writable one.
        write = ast.Call(ast.Name("_write_private_", ast.Load()), [node.value], [])
        copy_locations(write, node.value)
        node.value = write
        return node

    # --- async ------------------------------------------------------------------------------

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef
                               ) -> ast.AST | Iterable[ast.AST] | None:
        """``async def``, checked like ``def``: its coroutine runs under the sandbox's
        asyncio stand-in (``concurrency.py``), or by hand; never an async generator."""
        if any(isinstance(n, ast.Yield | ast.YieldFrom) or (isinstance(
                n, ast.comprehension) and n.is_async) for n in ast.walk(node)):
            self.error(node, "async generators and async comprehensions are not supported "
                             "in the sandbox")
        self.check_name(node, node.name, allow_magic_methods=True)
        self.check_function_argument_names(node)
        with self.print_info.new_print_scope():
            node = self.node_contents_visit(node)
            self.inject_print_collector(node)  # type: ignore[arg-type]  # a body, as def's
        return node

    def visit_Await(self, node: ast.Await) -> ast.AST | Iterable[ast.AST] | None:
        return self.node_contents_visit(node)

    def visit_AsyncWith(self, node: ast.AsyncWith) -> ast.AST | Iterable[ast.AST] | None:
        """``async with``: only the stand-ins' semaphores and task groups can be entered
        (model classes cannot define ``__aenter__``); unpacked like ``with``."""
        return self.visit_With(node)  # type: ignore[arg-type]

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST | Iterable[ast.AST] | None:
        """``x: int = 0``: target, annotation and value are visited like any expression."""
        return self.node_contents_visit(node)

    def visit_Nonlocal(self, node: ast.Nonlocal) -> ast.AST | Iterable[ast.AST] | None:
        for name in node.names:
            self.check_name(node, name)
        return node

    # --- match ----------------------------------------------------------------------------

    def visit_Match(self, node: ast.Match) -> ast.AST | Iterable[ast.AST] | None:
        """``match``, with the values and classes its patterns name read through the guards.

        Python reads dotted names in patterns (``case Color.RED``,
        ``case m.Point(x=0)``) and the attributes a class pattern matches with
        no ``_getattr_``.  So every such value is computed first, guarded, into
        a holder (``_match_N_ = _match_values_(...)``) and the pattern reads it
        back from there; classes whose pattern reads attributes must be the
        model's own, named tuples or built-ins (``_match_class_``), and the
        attribute names are checked here.
        """
        holder = f"_match_{self._match_count}_"
        self._match_count += 1
        self._held.append((holder, []))
        try:
            node = self.node_contents_visit(node)
            held = self._held[-1][1]
        finally:
            self._held.pop()
        if not held:
            return node
        values = ast.Call(ast.Name("_match_values_", ast.Load()), held, [])
        assign = ast.Assign([ast.Name(holder, ast.Store())], values)
        copy_locations(assign, node)
        return [assign, node]

    def _hold(self, expr: ast.expr) -> ast.expr:
        """Queue a visited expression; the pattern reads it back as ``holder.vN``."""
        holder, held = self._held[-1]
        held.append(expr)
        placeholder = ast.Attribute(ast.Name(holder, ast.Load()), f"v{len(held) - 1}",
                                    ast.Load())
        copy_locations(placeholder, expr)
        copy_locations(placeholder.value, expr)
        return placeholder

    def visit_match_case(self, node: ast.match_case) -> ast.AST | Iterable[ast.AST] | None:
        return self.node_contents_visit(node)

    def visit_MatchValue(self, node: ast.MatchValue) -> ast.AST | Iterable[ast.AST] | None:
        if isinstance(node.value, ast.Attribute):
            node.value = self._hold(self.visit(node.value))
        return node

    def visit_MatchSingleton(self, node: ast.MatchSingleton) -> ast.AST | Iterable[ast.AST] | None:
        return node

    def visit_MatchSequence(self, node: ast.MatchSequence) -> ast.AST | Iterable[ast.AST] | None:
        return self.node_contents_visit(node)

    def visit_MatchMapping(self, node: ast.MatchMapping) -> ast.AST | Iterable[ast.AST] | None:
        node.keys = [self._hold(self.visit(key)) if isinstance(key, ast.Attribute) else key
                     for key in node.keys]
        node.patterns = [self.visit(pattern) for pattern in node.patterns]
        self.check_name(node, node.rest)
        return node

    def visit_MatchClass(self, node: ast.MatchClass) -> ast.AST | Iterable[ast.AST] | None:
        for name in node.kwd_attrs:
            refusal = _pattern_attribute_refusal(name)
            if refusal:
                self.error(node, refusal)
        reads = ast.Constant(bool(node.patterns or node.kwd_patterns))
        check = ast.Call(ast.Name("_match_class_", ast.Load()), [self.visit(node.cls), reads], [])
        copy_locations(check, node.cls)
        node.cls = self._hold(check)
        node.patterns = [self.visit(pattern) for pattern in node.patterns]
        node.kwd_patterns = [self.visit(pattern) for pattern in node.kwd_patterns]
        return node

    def visit_MatchStar(self, node: ast.MatchStar) -> ast.AST | Iterable[ast.AST] | None:
        self.check_name(node, node.name)
        return node

    def visit_MatchAs(self, node: ast.MatchAs) -> ast.AST | Iterable[ast.AST] | None:
        self.check_name(node, node.name)
        return self.node_contents_visit(node)

    def visit_MatchOr(self, node: ast.MatchOr) -> ast.AST | Iterable[ast.AST] | None:
        return self.node_contents_visit(node)

    # --- augmented assignment -------------------------------------------------------------

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST | Iterable[ast.AST] | None:
        target = node.target
        if not isinstance(target, ast.Attribute | ast.Subscript):
            return super().visit_AugAssign(node)
        op = ast.Constant(IOPERATOR_TO_STR[type(node.op)])
        value = self.visit(node.value)
        if isinstance(target, ast.Attribute):
            # Visit a load of the same attribute: this runs RestrictedPython's
            # name checks and yields `_getattr_(obj, 'attr')`.
            probe = ast.copy_location(ast.Attribute(target.value, target.attr, ast.Load()), target)
            loaded = self.visit(probe)
            args = [loaded.args[0], ast.Constant(target.attr), op, value]
            helper = "_inplace_attr_"
        else:
            args = [self.visit(target.value), self.visit(target.slice), op, value]
            helper = "_inplace_item_"
        call = ast.Call(ast.Name(helper, ast.Load()), args, [])
        return ast.fix_missing_locations(ast.copy_location(ast.Expr(call), node))


def compile_code(source: str, filename: str = REPL_FILENAME, *, autobatch: bool = False,
                 helpers: frozenset[str] = frozenset()) -> types.CodeType:
    """Compile model code under the sandbox policy.

    ``autobatch``: first rewrite its predictable loops so their sub-queries are
    sent ahead (:mod:`rlm_sandbox.autobatch`; ``helpers`` names functions of
    earlier blocks whose prompts are known).  The rewritten tree goes through the
    same policy; a block the policy refuses is compiled again as written, so its
    errors are the model's own.

    Raises SyntaxError whose message lists every syntax or policy error with
    its line number, one per line.
    """
    if autobatch:
        try:
            tree = rewrite(ast.parse(source, filename), helpers)
        except (SyntaxError, ValueError, RecursionError):
            tree = None  # compiled as written below, which reports the error
        if tree is not None:
            result = compile_restricted_exec(tree, filename, policy=SandboxTransformer)
            if not result.errors and result.code is not None:
                return result.code
    try:
        result = compile_restricted_exec(source, filename, policy=SandboxTransformer)
    except ValueError as exc:  # e.g. "source code string cannot contain null bytes"
        raise SyntaxError(f"Line 1: {exc}") from None
    if result.errors:
        raise SyntaxError("\n".join(result.errors))
    code: types.CodeType | None = result.code
    if code is None:  # pragma: no cover - RestrictedPython returns errors instead
        raise SyntaxError("the code could not be compiled")
    return code
