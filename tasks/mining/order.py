"""Call order without data flow in one function body -> candidate precondition pairs (:class:`RawOrder`).

Half of real tool dependencies carry no data: the prerequisite must be called first. Code shows them as
an earlier call that shares an *operand* (a local name, ``self``, or an attribute chain of one:
``conn``, ``self.conn``, ``req.body``) with a later call, the earlier call's value never reaching the later one:

- ``guard``: the call tests the operand and decides whether the later call runs: ``if exists(p): remove(p)``,
  ``if not self.is_connected(): self.connect()``, ``if not valid(x): raise ...`` followed by ``save(x)`` (not ``return``: that dispatches),
  ``assert check(x)`` followed by ``use(x)``;
- ``same_receiver``: a method call on the operand whose result is discarded, then another call on it:
  ``conn.connect(); conn.send(d)``, ``parser.add_argument(..); parser.parse_args()`` (``v = c.get(); c.put()``
  is no setup: a getter whose value was wanted);
- ``validate_first``: a call whose result is discarded takes the operand as an argument, then a later
  call takes it too: ``validate(x); save(x)``.

Producers are statement-level calls whose value is dropped (``f(...)``) and guards' tests; per operand the
latest few of distinct callees and the guard in force count. Consumers are every call of a later statement
(the header of an ``if``/``for``/``with``), except inside a test assertion. The straight line is that of
:class:`tasks.mining.flow.BodyScanner`: a producer inside an ``if``/``for``/``with`` block does not reach
past the block; rebinding the operand ends it. Builtins (``isinstance``, ``len``) are no candidates.
Both sides are resolved as the flows' call targets are (tasks/mining/mine.py ``resolve_orders``). The same scan
reads docstrings' usage examples (tasks/mining/doctests.py), its patterns then prefixed ``doctest:``.
"""
from __future__ import annotations

import ast
import builtins
from typing import Any, NamedTuple

from tasks.mining.doctests import DOCTEST_PREFIX, DOCTEST_USAGE
from tasks.mining.facts import RawOrder
from tasks.mining.reasons import MineReason
from tasks.mining.syntax import child_nodes, dotted_name, store_names

# The scanner is tasks.mining.flow.BodyScanner (typed Any: flow imports this module, and imports form no cycles).
BodyScanner = Any

GUARD, SAME_RECEIVER, VALIDATE_FIRST = "guard", "same_receiver", "validate_first"
_EXITS = (ast.Raise,)  # ``if not valid(x): raise``; ``if is_a(x): return ...`` dispatches, it guards nothing after it
_BUILTINS = frozenset(dir(builtins))
_MAX_OPERAND_DEPTH = 3  # ``a.b.c``: deeper chains are rarely the same object twice
_LATEST = 3  # discarded-result calls kept per operand: ``p.add_argument(..); p.set_defaults(..); p.parse_args()``


class _Call:
    """A call as the order scan sees it: its operands at once, its target only when needed (resolving
    every call of a body would cost the scan; the straight-line types it reads are those of now)."""

    __slots__ = ("node", "receiver", "args", "text", "_resolved", "_scanner")

    def __init__(self, node: ast.Call, receiver: str | None, args: frozenset[str], text: str, scanner: BodyScanner):
        self.node, self.receiver, self.args, self.text = node, receiver, args, text
        self._scanner, self._resolved = scanner, None

    def operands(self) -> frozenset[str]:
        return self.args | {self.receiver} if self.receiver else self.args

    def resolved(self) -> tuple[str | None, bool, str]:
        """(qualified target or None, bound, why not resolved)."""
        if self._resolved is None:
            self._resolved = self._scanner.resolve(self.node.func)
        return self._resolved


class _Producer(NamedTuple):
    call: _Call
    role: str  # guard | receiver | argument


class OrderScanner:
    """Follows one body's statements (hooks called by :class:`BodyScanner` around each block and
    statement) and appends :class:`RawOrder` candidates to the module's ``orders``."""

    def __init__(self, scanner: BodyScanner, doctest_shown: frozenset[int] | None = None, doctest_function: str | None = None):
        self.s = scanner
        # a docstring's examples (tasks/mining/doctests.py): patterns read ``doctest:guard`` etc. (``doctest_usage:guard``
        # where the consumer is ``doctest_function``, the function the docstring documents, qualified), and the
        # expression statements whose value the session shows (these ids) are reads, never the earlier call of a pair
        self.prefix = "" if doctest_shown is None else DOCTEST_PREFIX
        self.shown = doctest_shown or frozenset()
        self.documented_function = doctest_function
        self.guards: dict[str, _Producer] = {}  # operand -> guard call in force (if/while body, or after a raise)
        # operand -> the latest discarded-result calls on/with it (newest first, distinct callees)
        self.last: dict[str, tuple[_Producer, ...]] = {}
        self.stack: list[tuple[dict[str, _Producer], dict[str, tuple[_Producer, ...]], set[str]]] = []
        self.killed: set[str] = set()  # operands rebound in the current block
        self.pending_guard: dict[int, _Call] = {}  # id(if/while body) -> its guard call
        self.seen: set[tuple[int, int]] = set()

    # operands ------------------------------------------------------------------------------
    def _operand(self, expr: ast.expr) -> str | None:
        expr, _ = self.s._through(expr)
        if isinstance(expr, ast.Name):
            return expr.id if expr.id in self.s.locals or expr.id == self.s.self_name else None
        if isinstance(expr, ast.Attribute):
            dotted = dotted_name(expr)
            if dotted is None or dotted.count(".") >= _MAX_OPERAND_DEPTH:
                return None
            head = dotted.split(".", 1)[0]
            return dotted if head in self.s.locals or head == self.s.self_name else None
        return None

    def _call(self, node: ast.Call) -> _Call | None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in _BUILTINS and self.s._is_builtin(func.id):
            return None  # builtins are never tools
        receiver = self._operand(func.value) if isinstance(func, ast.Attribute) else None
        args = {self._operand(a.value if isinstance(a, ast.Starred) else a) for a in node.args}
        args |= {self._operand(k.value) for k in node.keywords}
        args.discard(None)
        return _Call(node, receiver, frozenset(args), dotted_name(func) or ast.dump(func), self.s)  # type: ignore[arg-type]

    def _guard_calls(self, test: ast.expr) -> list[_Call]:
        """``if f(x)``, ``if not f(x)``, ``if f(x) is None``, ``if a and f(x)``: the calls that decide, when they
        take an operand (``if debug():`` decides about nothing in particular)."""
        parts = test.values if isinstance(test, ast.BoolOp) else [test]
        out = []
        for p in parts:
            while isinstance(p, ast.UnaryOp) and isinstance(p.op, ast.Not):
                p = p.operand
            if isinstance(p, ast.Compare):
                p = p.left
            if isinstance(p, ast.Await):
                p = p.value
            if isinstance(p, ast.Call):
                c = self._call(p)
                if c is not None and c.operands():
                    out.append(c)
        return out

    # hooks -----------------------------------------------------------------------------------
    def enter(self, body: list[ast.stmt]) -> None:
        self.stack.append((dict(self.guards), dict(self.last), self.killed))
        self.killed = set()
        guard = self.pending_guard.pop(id(body), None)
        if guard is not None:
            self._add_guard(guard)

    def exit(self, body: list[ast.stmt]) -> None:
        guards, last, outer_killed = self.stack.pop()
        self.guards, self.last = guards, last  # what a block called does not reach past it
        self._kill(self.killed)
        self.killed = outer_killed | self.killed

    def before(self, s: ast.stmt) -> None:
        for node in _calls(_header(s)):  # calls checked by an assertion are read back, not used
            call = self._call(node)
            if call is not None and call.operands():
                self._consume(call)
        if isinstance(s, (ast.If, ast.While)) and not any(isinstance(n, ast.NamedExpr) for n in ast.walk(s.test)):
            guards = self._guard_calls(s.test)
            if len(guards) == 1:  # ``if a(x) and b(x)``: which one guards is unclear
                self.pending_guard[id(s.body)] = guards[0]
        elif isinstance(s, ast.Assert):
            for g in self._guard_calls(s.test):
                self._add_guard(g)
        elif isinstance(s, ast.Expr) and id(s) not in self.shown:  # a call for its effect: a setup or a check of what it takes
            value = s.value.value if isinstance(s.value, ast.Await) else s.value
            call = self._call(value) if isinstance(value, ast.Call) else None
            if call is not None:
                call.resolved()  # the types of now
                for op in call.args:
                    self._push(op, _Producer(call, "argument"))
                if call.receiver:
                    self._push(call.receiver, _Producer(call, "receiver"))

    def after(self, s: ast.stmt) -> None:
        self.pending_guard.pop(id(getattr(s, "body", None)), None)
        stored = self._stores(s)
        if stored:
            self._kill(stored)
            self.killed |= stored
        if isinstance(s, ast.If) and not s.orelse and s.body and isinstance(s.body[-1], _EXITS):
            guards = self._guard_calls(s.test)  # ``if not valid(x): raise``: valid(x) holds from here on
            if len(guards) == 1:
                self._add_guard(guards[0])

    # ------------------------------------------------------------------------------------------
    def _push(self, op: str, producer: _Producer) -> None:
        kept = tuple(p for p in self.last.get(op, ()) if p.call.text != producer.call.text)
        self.last[op] = (producer, *kept[:_LATEST - 1])

    def _add_guard(self, g: _Call) -> None:
        g.resolved()
        for op in g.operands():
            self.guards[op] = _Producer(g, GUARD)

    @staticmethod
    def _stores(s: ast.stmt) -> set[str]:
        if isinstance(s, ast.Assign):
            return {n for t in s.targets for n in _stored(t)}
        if isinstance(s, (ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor)):
            return set(_stored(s.target))
        if isinstance(s, (ast.With, ast.AsyncWith)):
            return {n for i in s.items if i.optional_vars is not None for n in _stored(i.optional_vars)}
        if isinstance(s, ast.Delete):
            return {n for t in s.targets for n in _stored(t)}
        return set()

    def _kill(self, names: set[str]) -> None:
        if not names:
            return
        for table in (self.guards, self.last):
            for op in [op for op in table if any(op == n or op.startswith(n + ".") for n in names)]:
                del table[op]  # type: ignore[attr-defined]

    def _consume(self, call: _Call) -> None:
        # sorted: the first operand that links a producer names the pattern, and a set's order follows the hash seed
        for op in sorted(call.operands()):
            guard = self.guards.get(op)
            for producer in ((guard,) if guard else ()) + self.last.get(op, ()):
                if producer.call.node is call.node or producer.call.text == call.text:
                    continue
                key = (id(producer.call.node), id(call.node))
                if key in self.seen:
                    continue
                self.seen.add(key)
                target = call.resolved()[0]
                if target is not None and producer.call.resolved()[0] == target:
                    continue  # the same callee twice: no order
                if producer.role == GUARD:
                    pattern = GUARD
                elif producer.role == "receiver":
                    pattern = SAME_RECEIVER
                else:
                    pattern = VALIDATE_FIRST
                self._emit(call, producer.call, pattern, op)

    def _emit(self, consumer: _Call, producer: _Call, pattern: str, operand: str) -> None:
        c, p = consumer.node, producer.node
        (c_target, c_bound, c_why), (p_target, p_bound, p_why) = consumer.resolved(), producer.resolved()
        record_id = f"{self.s.mod.module}:{self.s.qualname}:{c.lineno}:{c.col_offset}:after:{p.lineno}:{p.col_offset}"
        on_self = pattern == SAME_RECEIVER and operand == self.s.self_name
        if self.prefix and c_target is not None and c_target == self.documented_function:
            pattern = f"{DOCTEST_USAGE}:{pattern}"
        else:
            pattern = self.prefix + pattern
        reason, detail = None, f"{pattern} on {operand}"
        if c_target is None:
            reason, detail = MineReason.UNRESOLVED_TARGET, f"consumer: {c_why}"
        elif p_target is None:
            reason, detail = MineReason.UNRESOLVED_TARGET, f"producer: {p_why}"
        self.s.mod.orders.append(RawOrder(record_id, c_target, p_target, pattern, c_bound, p_bound, reason, detail, on_self))


def _header(s: ast.stmt) -> list[ast.AST]:
    """The expressions a statement evaluates before any block of its own: where its calls are."""
    if isinstance(s, (ast.If, ast.While)):
        return [s.test]
    if isinstance(s, (ast.For, ast.AsyncFor)):
        return [s.iter]
    if isinstance(s, (ast.With, ast.AsyncWith)):
        return [i.context_expr for i in s.items]
    if isinstance(s, ast.Match):
        return [s.subject]
    if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Try)) or s.__class__.__name__ == "TryStar":
        return []
    return [s]


def _is_assertion(call: ast.Call) -> bool:
    name = call.func.attr if isinstance(call.func, ast.Attribute) else call.func.id if isinstance(call.func, ast.Name) else ""
    return name.startswith(("assert", "fail"))


def _calls(nodes: list[ast.AST]) -> list[ast.Call]:
    """Calls inside these expressions in source order, not entering lambdas, nor the arguments of a test
    assertion (``self.assertEqual(m.get_from(), ..)`` reads back what the test did: a check, not a use)."""
    found: list[ast.Call] = []
    stack = [n for n in nodes if not isinstance(n, ast.Assert)]
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(n, ast.Call):
            found.append(n)
            if _is_assertion(n):
                continue
        stack.extend(child_nodes(n))
    found.sort(key=lambda c: (c.lineno, c.col_offset))
    return found


def _stored(target: ast.AST) -> list[str]:
    """Names and ``a.b`` chains a store target rebinds (``self.conn = ...`` ends operand ``self.conn``)."""
    if isinstance(target, ast.Attribute):
        dotted = dotted_name(target)
        return [dotted] if dotted else []
    if isinstance(target, (ast.Tuple, ast.List, ast.Starred)):
        return [n for e in (target.elts if not isinstance(target, ast.Starred) else [target.value]) for n in _stored(e)]
    return list(store_names(target)) if isinstance(target, ast.Name) else []

