"""Preconditions stated in code -> precondition candidates (:class:`RawOrder`): a function that refuses to run unless
some state is set, and the functions that set it (pattern ``state_guard``); a function whose error message names
the call to make first (pattern ``error_message``).

    class Conn:
        def connect(self):
            self._sock = socket.create_connection(self.addr)

        def send(self, data):
            if self._sock is None:
                raise ConnectionError("not connected")  # send needs connect first
            ...

Call order shows a precondition by habit; a guard states it in the consumer's own body, most often with the
reason in the error message ("Must call fit() before predict()"). So one function showing it is enough: these
pairs are kept whatever ``--min-order-support`` says (tasks/mining/dataset.py ``precondition_pairs``). Read by
hand, 43 of 50 were right (bench/precondition_sample.md), against about 30% for call orders.

- **Consumer**: a method whose top-level statements (and those of a top-level ``with`` block) hold ``if <absent>:
  ... raise`` (no ``else``), where the test detects that ``self.X`` is unset (``self.X is None``, ``not self.X``,
  ``not hasattr(self, "X")``, or such tests joined by ``or``), or ``assert self.X`` / ``assert self.X is not None`` (joined by ``and``). A
  top-level call of a checker method of the class (``self._check_open()``: a name that starts with
  check/ensure/assert/require/verify/validate) brings that checker's guards: one hop.
- **Producer**: another method of the same class, or of a base class defined in the same module, that binds
  ``self.X`` to something other than an empty value (None, False, 0, "", an empty literal), itself or through a
  ``self.h()`` call (one hop). Dunder methods are no producers.
- **Skipped**: an X that ``__init__`` already binds non-empty (the guard then checks a reset, such as ``close``:
  "not after" is no "call first"), a binding from another attribute (``self.fp = self._fp`` restores), and the
  consumer itself. An X that more than ``MAX_STATE_SETTERS`` methods set is rejected as ``shared_state``.
- **Module level** alike: a function that raises unless a module global ``G`` is set, and the functions that
  declare ``global G`` and bind it non-empty (``init()`` before ``get()``).
- **Error messages**: a ``raise`` whose message names another function of the class (or module) in a sentence that
  says it comes first ("first", "before", "has not been", "not yet"), and says nothing of after, already, again,
  twice, once or closed: ``raise ValueError("prepare() must be called first")`` in ``get_ready``.

- **Fitted checks** (pattern ``fitted_check``): a method whose top-level statements call a fitted check on its
  own object (``check_is_fitted(self)``, scikit-learn's convention, which raises "call 'fit' ... before using this
  estimator"), paired with the public methods of its class (or a same-module base) that bind a fitted attribute
  (``self.coef_``: a name with a trailing underscore), themselves or through one ``self.h()`` call; when the check
  names its attributes (``check_is_fitted(self, "coef_")``), those.

- **Docstrings** (pattern ``docstring_order``): a sentence of a function's (or its class's) docstring that names
  another function of the class (or module) and says which comes first: "Must be called after :meth:`fit`",
  "``prepare()`` must have been called", "Raises if `open` has not been called" (that one first); "This should be
  called before `compile`" (this one first); in a class docstring, "`connect` must be called before `send`". A
  sentence that negates, compares or only may (``not``, ``instead``, ``can``, ``if ... has been called`` without
  a requirement) is not read.

- **State used before it is set** (pattern ``state_use``): the guard's implicit form. A method that dereferences
  ``self.X`` where it always runs (``self._sock.send(data)``, ``self.X[k]``, ``for _ in self.X``), and does not
  test X, catch ``AttributeError`` or bind X, itself or in what it calls, where X is unset until
  another method binds it: construction (the dunders of the class and its same-module bases, and all they call)
  binds it to None or to nothing, the class body binds it to nothing but None, and an outside base could not have
  set it (every base is in this module, or construction sets X to None). Unlike a guard's ``not self.X``, an
  empty list is a usable state. Module level alike: a global the module binds only to None, dereferenced by a
  function, bound by the functions that declare it ``global``. Read by hand, 47 of 50 were right.

- **An entry used before it is stored** (pattern ``keyed_state``, opt-in: ``mine-tdi --keyed-state``): the same for
  one key of a table. A method that reads ``self.X[key]`` (or ``del``s it, or ``pop``s it without a default) where
  it always runs, ``key`` one of its parameters, without testing ``key in self.X``, calling ``self.X.get`` or
  storing into X, itself or through what it calls, where construction binds X to an empty ``{}`` / ``dict()`` /
  ``OrderedDict()`` and nothing else rebinds it, and 1 to ``MAX_STATE_SETTERS`` other public methods store
  ``self.X[k] = ...`` (or ``setdefault``) under a parameter of theirs, without needing the entry themselves
  (reading it first, or raising without it): without one of them first, for the same key, the call raises
  ``KeyError``. ``add_worker`` before ``remove_worker``, ``register`` before ``unregister``, ``DisjointSet.add``
  before ``subset``. Read by hand, 23 of 24 were right.

The opposite polarity (``if self._closed: raise``) says what must *not* come first, and is not read.
Candidates then go through the order books like every call order (tasks/mining/mine.py ``resolve_orders``).
"""
from __future__ import annotations

import ast
import re
from collections.abc import Callable, Container, Iterable

from tasks.mining.docs import BodyIndex, _is_none, index_body
from tasks.mining.doctests import DOCTEST_USAGE
from tasks.mining.facts import ModuleFacts, RawOrder
from tasks.mining.reasons import MineReason
from tasks.mining.syntax import bound_names, child_nodes, top_level_statements

STATE_GUARD = "state_guard"
ERROR_MESSAGE = "error_message"
FITTED_CHECK = "fitted_check"
DOCSTRING_ORDER = "docstring_order"
STATE_USE = "state_use"
KEYED_STATE = "keyed_state"
# the code (or its doc) states the order; ``doctest_usage:same_receiver`` reads as its family, ``doctest_usage``
STATED_PATTERNS = (STATE_GUARD, ERROR_MESSAGE, FITTED_CHECK, DOCSTRING_ORDER, STATE_USE, KEYED_STATE, DOCTEST_USAGE)
MAX_STATE_SETTERS = 3  # more methods setting one state say little about which one a guard needs (shared_state)
_CHECKER_PREFIXES = ("check", "ensure", "assert", "require", "verify", "validate")

Method = ast.FunctionDef | ast.AsyncFunctionDef
# attribute -> (the guard statement, what it raises: the requirement in words where the code says it)
Guards = dict[str, tuple[ast.stmt, str]]


def stated(patterns: Iterable[str]) -> bool:
    """Whether a precondition pair's patterns include one where the consumer's code states the order."""
    return not set(STATED_PATTERNS).isdisjoint(p.split(":", 1)[0] for p in patterns)


def _attr_of(expr: ast.expr, owner: str) -> str | None:
    """``X`` of ``owner.X`` (owner: ``self``), or of a bare name ``X`` when owner is ``""`` (module globals)."""
    if not owner:
        return expr.id if isinstance(expr, ast.Name) else None
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == owner:
        return expr.attr
    return None


def _hasattr_of(expr: ast.expr, owner: str) -> str | None:
    """``X`` of ``hasattr(owner, "X")`` (a method's own object only)."""
    if (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "hasattr" and owner
            and len(expr.args) == 2 and isinstance(expr.args[0], ast.Name) and expr.args[0].id == owner
            and isinstance(expr.args[1], ast.Constant) and isinstance(expr.args[1].value, str)):
        return expr.args[1].value
    return None


def _absent(test: ast.expr, owner: str) -> list[str]:
    """Attributes whose absence ``test`` detects: ``X is None``, ``not X``, ``not hasattr(self, "X")``, joined by
    ``or``."""
    parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) else [test]
    found = []
    for p in parts:
        if isinstance(p, ast.UnaryOp) and isinstance(p.op, ast.Not):
            attr = _attr_of(p.operand, owner) or _hasattr_of(p.operand, owner)
        elif (isinstance(p, ast.Compare) and len(p.ops) == 1 and isinstance(p.ops[0], ast.Is)
              and _is_none(p.comparators[0])):
            attr = _attr_of(p.left, owner)
        else:
            attr = None
        if attr:
            found.append(attr)
    return found


def _present(test: ast.expr, owner: str) -> list[str]:
    """Attributes an assertion requires set: ``assert X``, ``assert X is not None``, joined by ``and``."""
    parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    found = []
    for p in parts:
        attr = _attr_of(p, owner)
        if attr is None and (isinstance(p, ast.Compare) and len(p.ops) == 1 and isinstance(p.ops[0], ast.IsNot)
                             and _is_none(p.comparators[0])):
            attr = _attr_of(p.left, owner)
        if attr:
            found.append(attr)
    return found


def _said(node: ast.stmt) -> str:
    try:
        return " ".join(ast.unparse(node).split())[:160]
    except (ValueError, RecursionError):  # pragma: no cover - unparse of a tree ast.parse built
        return type(node).__name__


def _straight(body: list[ast.stmt]) -> Iterable[ast.stmt]:
    """Statements that run whenever the body runs: the top level and ``with`` blocks (``with self._lock:``), not
    ``try`` (an error raised there may be caught) nor branches."""
    for s in body:
        yield s
        if isinstance(s, (ast.With, ast.AsyncWith)):
            yield from _straight(s.body)


def guards_of(body: list[ast.stmt], owner: str) -> Guards:
    """The state a body's top-level statements refuse to run without (see the module doc)."""
    found: Guards = {}
    for s in _straight(body):
        if isinstance(s, ast.If) and not s.orelse and s.body and isinstance(s.body[-1], ast.Raise):
            for attr in _absent(s.test, owner):
                found.setdefault(attr, (s, _said(s.body[-1])))
        elif isinstance(s, ast.Assert):
            for attr in _present(s.test, owner):
                found.setdefault(attr, (s, _said(s)))
    return found


def _empty(value: ast.expr) -> bool:
    if isinstance(value, ast.Constant):
        return value.value in (None, False, 0, "", b"")
    if isinstance(value, (ast.List, ast.Tuple, ast.Set)):
        return not value.elts
    if isinstance(value, ast.Dict):
        return not value.keys
    return False


def _binds(assigns: Iterable[ast.Assign | ast.AnnAssign], owner: str) -> dict[str, ast.stmt]:
    """Attributes bound to a non-empty value -> the first statement that does. ``self.fp = self._fp`` restores
    a state made elsewhere: no binding."""
    found: dict[str, ast.stmt] = {}
    for a in assigns:
        if a.value is None or _empty(a.value) or _attr_of(a.value, owner) is not None:
            continue
        for t in a.targets if isinstance(a, ast.Assign) else [a.target]:
            attr = _attr_of(t, owner)
            if attr:
                found.setdefault(attr, a)
    return found


def _self_calls(method: Method, index: BodyIndex) -> tuple[list[str], set[str]]:
    """(methods of its first parameter (``self``) called as statements that always run, and called anywhere)."""
    owner = _first_param(method) or ""
    top = [name for s in _straight(method.body) if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
           for name in [_attr_of(s.value.func, owner)] if name]
    anywhere = {name for n in index.calls for name in [_attr_of(n.func, owner)] if name}
    return top, anywhere


def _is_checker(name: str) -> bool:
    return name.lstrip("_").lower().startswith(_CHECKER_PREFIXES)


def _first_param(method: Method) -> str | None:
    positional = [*method.args.posonlyargs, *method.args.args]
    return positional[0].arg if positional else None


def _record_id(mod: ModuleFacts, consumer: str, guard: ast.stmt, bind: ast.stmt) -> str:
    return f"{mod.module}:{consumer}:{guard.lineno}:{guard.col_offset}:after:{bind.lineno}:{bind.col_offset}"


def _owners(mod: ModuleFacts, cls: str) -> list[str]:
    """``cls`` and its bases defined in the same module, by their names in the module, the class first."""
    return [cls, *(b[len(mod.module) + 1:] for b in mod.bases.get(cls, []) if b.startswith(mod.module + "."))]


def _family(mod: ModuleFacts, cls: str, methods: dict[str, dict[str, Method]]) -> dict[str, tuple[str, Method]]:
    """Method name -> (the class that defines it, its def) for ``cls`` and its bases defined in the same module,
    the class's own first (an override hides the base's method)."""
    found: dict[str, tuple[str, Method]] = {}
    for owner in _owners(mod, cls):
        for name, m in methods.get(owner, {}).items():
            found.setdefault(name, (owner, m))
    return found


def _family_binds(mod: ModuleFacts, cls: str, methods: dict[str, dict[str, Method]],
                  indexes: dict[int, BodyIndex]) -> dict[str, tuple[str, dict[str, ast.stmt]]]:
    """Method name -> (the class that defines it, the attributes it binds non-empty -> the statement), for ``cls``
    and its same-module bases (``_family``): what the method binds itself or through one ``self.h()`` call."""
    family = _family(mod, cls, methods)
    direct = {name: _binds((indexes.get(id(m)) or index_body(m)).attr_assigns, _first_param(m) or "")
              for name, (_, m) in family.items()}
    found = {}
    for name, (owner, m) in family.items():
        bound = dict(direct[name])
        for helper in sorted(_self_calls(m, indexes.get(id(m)) or index_body(m))[1]):  # sorted: the same record ids every run
            if helper != name and helper in direct and not helper.startswith("__"):
                for attr, stmt in direct[helper].items():
                    bound.setdefault(attr, stmt)
        found[name] = (owner, bound)
    return found


def class_guard_orders(mod: ModuleFacts, methods: dict[str, dict[str, Method]],
                       indexes: dict[int, BodyIndex]) -> list[RawOrder]:
    """``methods``: class qualname -> method name -> def, instance methods only, for the module's classes."""
    guards: dict[str, dict[str, Guards]] = {}
    for cls, defs in methods.items():
        own = {name: guards_of(m.body, _first_param(m) or "") for name, m in defs.items()}
        if any(own.values()):
            guards[cls] = own
    orders: list[RawOrder] = []
    for cls, own in guards.items():
        defs = methods[cls]
        calls = {name: _self_calls(m, indexes.get(id(m)) or index_body(m)) for name, m in defs.items()}
        required: dict[str, Guards] = {}
        for name, g in own.items():
            merged = dict(g)
            for helper in calls[name][0]:  # self._check_open(): the checker's guards are the caller's
                if helper != name and _is_checker(helper):
                    for attr, where in own.get(helper, {}).items():
                        merged.setdefault(attr, (where[0], f"via {helper}: {where[1]}"))
            if merged:
                required[name] = merged
        if not required:
            continue
        # producers: this class's methods and those of its same-module bases, each with what it binds (one hop)
        binds = {f"{owner}.{name}": bound for name, (owner, bound) in _family_binds(mod, cls, methods, indexes).items()}
        set_by_init = binds.get(f"{cls}.__init__", {})
        for consumer, needs in required.items():
            for attr, (guard, said) in needs.items():
                if attr in set_by_init:
                    continue
                setters = [q for q, bound in binds.items() if attr in bound and not q.rsplit(".", 1)[-1].startswith("__")]
                shared = len(setters) > MAX_STATE_SETTERS  # flatbuffers' ``nested``: which Start* does EndObject need?
                for producer in setters:
                    if producer.rsplit(".", 1)[-1] == consumer:
                        continue
                    orders.append(RawOrder(
                        _record_id(mod, f"{cls}.{consumer}", guard, binds[producer][attr]),
                        f"{mod.module}.{cls}.{consumer}", f"{mod.module}.{producer}", STATE_GUARD, True, True,
                        MineReason.SHARED_STATE if shared else None,
                        f"self.{attr} is set by {len(setters)} methods (> {MAX_STATE_SETTERS})" if shared
                        else f"{STATE_GUARD} on self.{attr}: {said}"))
    return orders


_FITTED_CHECK = re.compile(r"^_?(check|ensure|assert)_(is_)?fitted$")


def _fitted_checks(method: Method, owner: str) -> list[tuple[ast.Call, tuple[str, ...]]]:
    """The fitted checks on ``owner`` among the statements that always run, each with the attributes it names
    (empty: any fitted attribute)."""
    found = []
    for s in _straight(method.body):
        call = s.value if isinstance(s, (ast.Expr, ast.Assign)) and isinstance(s.value, ast.Call) else None
        if call is None:
            continue
        name = call.func.id if isinstance(call.func, ast.Name) else call.func.attr if isinstance(call.func, ast.Attribute) else ""
        if not (_FITTED_CHECK.match(name) and call.args and isinstance(call.args[0], ast.Name) and call.args[0].id == owner):
            continue
        named = [*call.args[1:2], *(k.value for k in call.keywords if k.arg == "attributes")]
        attrs = [c.value for n in named for c in ([n] if isinstance(n, ast.Constant) else getattr(n, "elts", []))
                 if isinstance(c, ast.Constant) and isinstance(c.value, str)]
        found.append((call, tuple(attrs)))
    return found


def _fitted(attr: str) -> bool:
    """scikit-learn's fitted-attribute convention: ``coef_``, ``n_features_in_``; not ``_private`` nor dunder."""
    return attr.endswith("_") and not attr.startswith("_")


def fitted_orders(mod: ModuleFacts, methods: dict[str, dict[str, Method]],
                  indexes: dict[int, BodyIndex]) -> list[RawOrder]:
    """``fitted_check``: ``check_is_fitted(self)`` in ``predict``, paired with the public methods of the class (or a
    same-module base) that bind a fitted attribute (``fit``, ``partial_fit``): see the module doc."""
    orders: list[RawOrder] = []
    for cls, defs in methods.items():
        checks = {name: found for name, m in defs.items() if (found := _fitted_checks(m, _first_param(m) or ""))}
        if not checks:
            continue
        binds = _family_binds(mod, cls, methods, indexes)
        for consumer, found in checks.items():
            for call, named in found[:1]:  # one check states the need; a second says nothing new
                for name, (owner, bound) in binds.items():
                    if name == consumer or name.startswith("_"):
                        continue
                    fits = [a for a in bound if (a in named if named else _fitted(a))]
                    if not fits:
                        continue
                    orders.append(RawOrder(
                        _record_id(mod, f"{cls}.{consumer}", call, bound[fits[0]]), f"{mod.module}.{cls}.{consumer}",
                        f"{mod.module}.{owner}.{name}", FITTED_CHECK, True, True, None,
                        f"{FITTED_CHECK}: {_said(ast.Expr(call))} (self.{fits[0]} set by {name})"))
    return orders


def _global_setters(functions: dict[str, Method], indexes: dict[int, BodyIndex],
                    empty: Callable[[ast.expr], bool] = _empty) -> dict[str, dict[str, ast.stmt]]:
    """Module function -> the globals it declares ``global`` and binds to a value that is not ``empty`` (a guard's
    empty: None, 0, ""...; a use's: None only) -> the first statement that does."""
    setters: dict[str, dict[str, ast.stmt]] = {}
    for name, f in functions.items():
        declared = (indexes.get(id(f)) or index_body(f)).global_names
        if not declared:
            continue
        found: dict[str, ast.stmt] = {}
        for n in ast.walk(f):
            if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None and not empty(n.value):
                for t in n.targets if isinstance(n, ast.Assign) else [n.target]:
                    if isinstance(t, ast.Name) and t.id in declared:
                        found.setdefault(t.id, n)
        if found:
            setters[name] = found
    return setters


def _own_names(f: Method, index: BodyIndex) -> set[str]:
    """A module function's own names, which no module global can be: its parameters and its locals."""
    return {a.arg for a in [*f.args.posonlyargs, *f.args.args, *f.args.kwonlyargs]} | (index.stores - index.global_names)


def global_guard_orders(mod: ModuleFacts, functions: dict[str, Method], indexes: dict[int, BodyIndex]) -> list[RawOrder]:
    """The module-level form: ``if _client is None: raise`` in ``get``, ``global _client; _client = ...`` in ``init``."""
    setters = _global_setters(functions, indexes)
    if not setters:
        return []
    orders: list[RawOrder] = []
    for consumer, f in functions.items():
        own = _own_names(f, indexes.get(id(f)) or index_body(f))
        for attr, (guard, said) in guards_of(f.body, "").items():
            if attr in own:  # ``if path is None: raise``: the function's own name, no module state
                continue
            for producer, bound in setters.items():
                if producer != consumer and attr in bound and not producer.startswith("__"):
                    orders.append(RawOrder(_record_id(mod, consumer, guard, bound[attr]), f"{mod.module}.{consumer}",
                                           f"{mod.module}.{producer}", STATE_GUARD, False, False, None,
                                           f"{STATE_GUARD} on global {attr}: {said}"))
    return orders


_FIRST = re.compile(r"\b(first|before|prior to|has not been|have not been|hasn't been|haven't been|not been called|"
                    r"was not called|were not called|not yet)\b", re.I)
_NOT_AFTER = re.compile(r"\b(after|already|twice|again|closed|once)\b", re.I)  # what must not come first
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_MENTION = re.compile(r"`\.?(\w+)(?:\(\))?`|\b(\w+)\(\)")


def _raised_texts(index: BodyIndex) -> list[tuple[ast.Raise, str]]:
    """The string parts of each ``raise`` of a def's own body (``index``: its walk; nested defs are theirs)."""
    found = []
    for n in index.raises:
        text = " ".join(c.value for c in ast.walk(n.exc) if isinstance(c, ast.Constant) and isinstance(c.value, str))  # type: ignore[arg-type]
        if text:
            found.append((n, " ".join(text.split())))
    return found


def _named_first(text: str) -> list[str]:
    """Names an error message says must come first: ``"Must call prepare() first"`` -> prepare. Sentence by
    sentence: in "Using `.select` here is not allowed. You can first run `.drop_index()`" only drop_index is."""
    if _NOT_AFTER.search(text):
        return []
    return [a or b for sentence in _SENTENCE.split(text) if _FIRST.search(sentence)
            for a, b in _MENTION.findall(sentence)]


def _scopes(mod: ModuleFacts, methods: dict[str, dict[str, Method]], functions: dict[str, Method]
            ) -> list[tuple[str, dict[str, Method], dict[str, tuple[str, Method]]]]:
    """(class or "" for module level, its own functions, every function a message or docstring there can name ->
    (its owner, its def)): a class's family (``_family``), or the module's functions."""
    scopes = [(cls, defs, _family(mod, cls, methods)) for cls, defs in methods.items()]
    scopes.append(("", functions, {name: ("", f) for name, f in functions.items()}))
    return scopes


def message_orders(mod: ModuleFacts, methods: dict[str, dict[str, Method]], functions: dict[str, Method],
                   indexes: dict[int, BodyIndex]) -> list[RawOrder]:
    """``error_message``: a function whose error says another of its class (or of its module, at module level)
    must be called first: ``raise ValueError("prepare() must be called first")`` in ``get_ready``."""
    orders: list[RawOrder] = []
    for scope, own, known in _scopes(mod, methods, functions):
        for name, fn in own.items():
            seen: set[str] = set()
            consumer = f"{scope}.{name}" if scope else name
            for node, text in _raised_texts(indexes.get(id(fn)) or index_body(fn)):
                for named in _named_first(text):
                    if named == name or named.startswith("__") or named in seen or named not in known:
                        continue
                    seen.add(named)
                    owner, producer = known[named]
                    orders.append(RawOrder(_record_id(mod, consumer, node, producer), f"{mod.module}.{consumer}",
                                           f"{mod.module}.{owner + '.' if owner else ''}{named}", ERROR_MESSAGE,
                                           bool(scope), bool(scope), None, f"{ERROR_MESSAGE}: {text[:160]}"))
    return orders


def stated_orders(mod: ModuleFacts, defs: list[tuple[ast.AST, str, str | None]],
                  indexes: dict[int, BodyIndex], unset_globals: Container[str] = (),
                  keyed_state: bool = False) -> list[RawOrder]:
    """Every candidate of one module whose code states the order: state guards, error messages, fitted checks,
    docstrings and state used before it is set (``defs``: parse's (node, qualname, class name) list;
    ``unset_globals``: the module's names bound only to None at its top level, ``unset_module_globals``;
    ``keyed_state``: entries used before they are stored too, opt-in: see docs/mining.md)."""
    methods: dict[str, dict[str, Method]] = {}
    functions: dict[str, Method] = {}
    classes: dict[str, ast.ClassDef] = {}
    for node, qualname, class_name in defs:
        if isinstance(node, ast.ClassDef):
            if qualname not in mod.duplicated:
                classes[qualname] = node
            continue
        if qualname in mod.duplicated:
            continue
        facts = mod.functions.get(qualname)
        if class_name is None:
            functions[qualname] = node  # type: ignore[assignment]
        elif facts is not None and facts.binding == "instance" and _first_param(node):  # type: ignore[arg-type]
            methods.setdefault(class_name, {})[qualname.rsplit(".", 1)[-1]] = node  # type: ignore[assignment]
    return (class_guard_orders(mod, methods, indexes) + global_guard_orders(mod, functions, indexes)
            + message_orders(mod, methods, functions, indexes) + fitted_orders(mod, methods, indexes)
            + docstring_orders(mod, methods, functions, classes) + state_use_orders(mod, methods, classes, indexes)
            + global_use_orders(mod, functions, indexes, unset_globals)
            + (keyed_state_orders(mod, methods, indexes) if keyed_state else []))


# -- docstrings that state an order ----------------------------------------------------------------
# a mention of a function in prose: ``name()``, `name`, ``name``, :meth:`name`, :meth:`~pkg.Cls.name`
_DOC_MENTION = re.compile(r"`+[~.]?(?:\w+\.)*(\w+)(?:\(\))?`+|\b(\w+)\(\)")
_CALLED = r"(?:called|invoked|run|executed)"
_MODAL = r"(?:must|should|needs? to|has to|have to|is required to|are required to)"
_TAIL = r"(?:\s+(?:calling|the|a call to|method|function))*\s*(?::\w+:)?\s*$"  # words between the verb and the mention
_HEAD = r"^\s*(?:\(\)\s*)?(?:(?:method|function|is|was)\s+)?"  # words between the mention and the verb
_MUST_RUN = rf"{_MODAL} (?:only |always )?(?:be {_CALLED}|run|come)"  # "must be called", "should only run"
# "<this> must be called before M": this one first
_THIS_BEFORE = re.compile(rf"\b{_MUST_RUN} (?:before|prior to){_TAIL}", re.I)
# "... must be called after M", "only after M", "requires a call to M": M first
_OTHER_BEFORE = re.compile(rf"(?:\b{_MUST_RUN} (?:only )?after|\bonly (?:be {_CALLED} |valid |"
                           rf"available |works? )?after|\brequires? (?:a (?:prior |previous )?call to|calling|that)){_TAIL}", re.I)
# "after calling M", when the sentence says it is needed ("The hook will be called after calling M" is no rule): M first
_AFTER_CALLING = re.compile(rf"\bafter (?:calling|a call to|running){_TAIL}", re.I)
# "call M first", "run M() before": M first
_CALL_VERB = re.compile(rf"\b(?:call|run){_TAIL}", re.I)
_CALL_FIRST = re.compile(rf"{_HEAD}(?:first|before|beforehand|prior to)\b", re.I)
# "M must be called first", "M must have been called": M first ("M should be called later" is no order)
_OTHER_MODAL = re.compile(rf"{_HEAD}{_MODAL} (?:(?:have been|first be|already be) {_CALLED}|be {_CALLED} (?:at least once )?"
                          rf"(?:first|before|beforehand|prior))", re.I)
# "raises if M has not been called", "only once M has been called": M first, when the sentence says it is needed
_OTHER_BEEN = re.compile(rf"{_HEAD}(?:has|have) (?:not |not yet |already )?been {_CALLED}|{_HEAD}was not {_CALLED}", re.I)
_REQUIRED = re.compile(r"\b(raises?|error|exception|must|should|only|requires?|needs?|unless)\b", re.I)
# "X must be called before Y" in a class docstring: X first
_BETWEEN_BEFORE = re.compile(rf"{_HEAD}(?:{_MUST_RUN}|is (?:always )?{_CALLED}) (?:before|prior to){_TAIL}", re.I)
_BETWEEN_AFTER = re.compile(rf"{_HEAD}{_MUST_RUN} (?:only )?after{_TAIL}", re.I)
_DOC_SKIP = re.compile(r"\b(not|never|cannot|can't|don't|instead|rather|alternative|equivalent|same as|similar|like|unlike|"
                       r"deprecated|see also|can|may|optionally|either)\b", re.I)
_NEEDED_NOT = re.compile(rf"\b(?:has|have|was|were) not (?:yet )?been {_CALLED}|\bwas not {_CALLED}|\bnot yet {_CALLED}", re.I)
_SECTION = re.compile(r"^\s*(?:Args|Arguments|Parameters|Params|Returns?|Yields?|Examples?|Attributes|See Also|"
                      r"Keyword Arguments|Other Parameters)\s*:?\s*$|^\s*:(?:param|type|returns?|rtype)\b", re.I | re.M)


def _doc_prose(doc: str) -> str:
    """A docstring up to its first parameter, return, example or reference section, on one line."""
    cut = _SECTION.search(doc)
    return " ".join((doc[: cut.start()] if cut else doc).split())


def _doc_sentences(doc: str) -> list[str]:
    """Sentences that state a requirement (a negation is read only as "has not been called")."""
    return [s for s in _SENTENCE.split(_doc_prose(doc)) if not _DOC_SKIP.search(_NEEDED_NOT.sub("", s))]


def _order_in_doc(sentence: str, this: str | None, known: Container[str]) -> list[tuple[str, str]]:
    """(first, then) pairs one sentence states; ``this``: the function the docstring documents (None: a class's);
    ``known``: the functions a mention can name (other mentions, ``True`` or a parameter, are prose)."""
    mentions = [(m.start(), m.end(), n) for m in _DOC_MENTION.finditer(sentence) if (n := m.group(1) or m.group(2)) in known]
    names = {n for _, _, n in mentions if n != this}
    if this is not None and len(names) == 1:
        start, end, name = next(m for m in mentions if m[2] in names)
        before, after = sentence[:start], sentence[end:]
        if _THIS_BEFORE.search(before):
            return [(this, name)]
        if (_OTHER_BEFORE.search(before) or (_CALL_VERB.search(before) and _CALL_FIRST.match(after))
                or _OTHER_MODAL.match(after)
                or ((_OTHER_BEEN.match(after) or _AFTER_CALLING.search(before)) and _REQUIRED.search(sentence))):
            return [(name, this)]
        return []
    if this is None and len(mentions) == 2 and mentions[0][2] != mentions[1][2]:
        (_, end0, a), (start1, _, b) = mentions
        between = sentence[end0:start1]
        if _BETWEEN_BEFORE.match(between):
            return [(a, b)]
        if _BETWEEN_AFTER.match(between):
            return [(b, a)]
    return []


def docstring_orders(mod: ModuleFacts, methods: dict[str, dict[str, Method]], functions: dict[str, Method],
                     classes: dict[str, ast.ClassDef]) -> list[RawOrder]:
    """``docstring_order``: a docstring sentence that says which of two functions of the class (or module) comes
    first. The record id points at the docstring and at the function named."""
    orders: list[RawOrder] = []
    seen: set[tuple[str, str]] = set()

    def add(scope: str, known: dict[str, tuple[str, Method]], first: str, then: str, node: ast.AST, text: str) -> None:
        if first == then or first not in known or then not in known or first.startswith("__") or then.startswith("__"):
            return
        (p_owner, p_def), (c_owner, c_def) = known[first], known[then]
        producer = f"{mod.module}.{p_owner + '.' if p_owner else ''}{first}"
        consumer = f"{mod.module}.{c_owner + '.' if c_owner else ''}{then}"
        if (consumer, producer) in seen:
            return
        seen.add((consumer, producer))
        orders.append(RawOrder(_record_id(mod, f"{scope + '.' if scope else ''}{then}", node, p_def), consumer, producer,  # type: ignore[arg-type]
                               DOCSTRING_ORDER, bool(scope), bool(scope), None, f"{DOCSTRING_ORDER}: {text[:160]}"))

    for scope, own, known in _scopes(mod, methods, functions):
        for name, fn in own.items():
            doc = ast.get_docstring(fn, clean=True)
            if doc:
                for sentence in _doc_sentences(doc):
                    for first, then in _order_in_doc(sentence, name, known):
                        add(scope, known, first, then, fn.body[0], sentence)
        cls_node = classes.get(scope) if scope else None
        doc = ast.get_docstring(cls_node, clean=True) if cls_node is not None else None
        if doc:
            for sentence in _doc_sentences(doc):
                for first, then in _order_in_doc(sentence, None, known):
                    add(scope, known, first, then, cls_node.body[0], sentence)  # type: ignore[union-attr]
    return orders


# -- state used before it is set ---------------------------------------------------------------------
_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
# blocks whose header only tests (a test is no use) and whose bodies may not run
_BRANCHES = (ast.If, ast.While, ast.Try, getattr(ast, "TryStar", ast.Try), ast.Match)
_NO_STATE_BASES = ("typing.Generic", "typing.Protocol", "abc.ABC")  # bases that set no instance state


def _walk_own(node: ast.AST) -> Iterable[ast.AST]:
    """``node`` and what it holds, nested defs and lambdas left out (their bodies run later, if ever)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(c for c in child_nodes(n) if not isinstance(c, _NESTED))


def _runs_always(body: list[ast.stmt]) -> Iterable[tuple[ast.stmt, ast.AST]]:
    """(statement, a part of it that uses what it holds whenever the body runs): a simple statement whole; a
    ``with`` block's context managers and a ``for`` loop's iterable; nothing of a branch, loop body or ``try``."""
    for s in _straight(body):
        if isinstance(s, (ast.With, ast.AsyncWith)):
            yield from ((s, item.context_expr) for item in s.items)
        elif isinstance(s, (ast.For, ast.AsyncFor)):
            yield s, s.iter
        elif not isinstance(s, _BRANCHES + _NESTED):
            yield s, s


def _tested(fn: Method, owner: str) -> set[str] | None:
    """Attributes of ``owner`` (bare names for ``""``) a function tests: ``if self.X``, ``self.X is None``,
    ``hasattr(self, "X")``, ``self.X and ...``; None when it catches ``AttributeError`` (any absence, then)."""
    tested: set[str] = set()
    for n in _walk_own(fn):
        tests = ([n.test] if isinstance(n, (ast.If, ast.IfExp, ast.While, ast.Assert)) else
                 list(n.values) if isinstance(n, ast.BoolOp) else [])
        for t in tests:
            for part in _walk_own(t):
                if (attr := _attr_of(part, owner)) and not isinstance(getattr(part, "ctx", None), ast.Store):
                    tested.add(attr)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("hasattr", "getattr") \
                and len(n.args) >= 2 and isinstance(n.args[0], ast.Name) and n.args[0].id == owner \
                and isinstance(n.args[1], ast.Constant):
            tested.add(n.args[1].value)
        if isinstance(n, ast.Try) and any(h.type is not None and "AttributeError" in ast.dump(h.type) for h in n.handlers):
            return None
    return tested


def _used(method: Method, owner: str, wanted: Container[str]) -> dict[str, ast.stmt]:
    """Attributes of ``owner`` among ``wanted`` a method dereferences where it always runs (``self.X.read()``,
    ``self.X(...)``, ``self.X[k]``, ``for _ in self.X``, ``with self.X:``) -> the statement; none it tests
    (``_tested``: the method copes with its absence), and none at all when it catches ``AttributeError``."""
    used: dict[str, ast.stmt] = {}
    for stmt, part in _runs_always(method.body):
        if part is not stmt and (attr := _attr_of(part, owner)) and attr in wanted:  # with self.X / for _ in self.X
            used.setdefault(attr, stmt)
        for n in _walk_own(part):
            target = n.value if isinstance(n, (ast.Attribute, ast.Subscript)) else n.func if isinstance(n, ast.Call) else None
            if target is not None and (attr := _attr_of(target, owner)) and attr in wanted \
                    and isinstance(getattr(target, "ctx", None), ast.Load):
                used.setdefault(attr, stmt)
    if not used:
        return used
    tested = _tested(method, owner)
    return {} if tested is None else {a: s for a, s in used.items() if a not in tested}


def _class_level(cls: ast.ClassDef | None) -> tuple[set[str], set[str]]:
    """(names the class body binds to anything but None, declares as fields or defines as methods; names it binds
    to None)."""
    bound, unset = set(), set()
    for s in cls.body if cls is not None else []:
        targets = s.targets if isinstance(s, ast.Assign) else [s.target] if isinstance(s, ast.AnnAssign) else []
        for t in targets:
            if isinstance(t, ast.Name):
                (unset if s.value is not None and _is_none(s.value) else bound).add(t.id)  # type: ignore[union-attr]
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
            bound.add(s.name)  # a method or property: ``self.X`` is no state
    return bound, unset


def _direct_binds(m: Method, index: BodyIndex) -> tuple[set[str], set[str]]:
    """(attributes of its own object a method binds to anything but None, those it binds to None)."""
    bound, unset = set(), set()
    for a in index.attr_assigns:
        for t in a.targets if isinstance(a, ast.Assign) else [a.target]:
            if (attr := _attr_of(t, _first_param(m) or "")) and a.value is not None:
                (unset if _is_none(a.value) else bound).add(attr)
    return bound, unset


class _Reach:
    """What a method of a class binds and tests, itself or through any chain of ``self.h()`` calls in the class's
    family (``_family``): the rules that rule a use out (set at construction, made or checked by the consumer
    itself: ``add`` calls ``_lookup``, which tests the table and builds it) follow every hop; the producers named
    stay one hop, as for guards."""

    def __init__(self, family: dict[str, tuple[str, Method]], indexes: dict[int, BodyIndex]):
        self.family, self.indexes = family, indexes
        self._checks: dict[int, set[str] | None] = {}
        self._callees: dict[int, list[Method]] = {}  # one walk per method, however many consumers reach it
        self._binds: dict[int, tuple[set[str], set[str]]] = {}

    def direct(self, m: Method) -> tuple[set[str], set[str]]:
        """What ``m`` itself binds: (to anything but None, to None)."""
        if id(m) not in self._binds:
            self._binds[id(m)] = _direct_binds(m, self.indexes.get(id(m)) or index_body(m))
        return self._binds[id(m)]

    def tested(self, m: Method) -> set[str] | None:
        """What ``m`` itself tests (``_tested``)."""
        if id(m) not in self._checks:
            self._checks[id(m)] = _tested(m, _first_param(m) or "")
        return self._checks[id(m)]

    def callees(self, m: Method) -> list[Method]:
        if id(m) not in self._callees:
            names = _self_calls(m, self.indexes.get(id(m)) or index_body(m))[1]
            self._callees[id(m)] = [self.family[h][1] for h in sorted(names) if h in self.family]
        return self._callees[id(m)]

    def reached(self, start: Method) -> list[Method]:
        seen, todo, found = {id(start)}, [start], [start]
        while todo:
            for c in self.callees(todo.pop()):
                if id(c) not in seen:
                    seen.add(id(c))
                    todo.append(c)
                    found.append(c)
        return found

    def binds(self, start: Method) -> tuple[set[str], set[str]]:
        bound, unset = set(), set()
        for m in self.reached(start):
            b, u = self.direct(m)
            bound |= b
            unset |= u
        return bound, unset

    def copes(self, start: Method) -> tuple[set[str], bool]:
        """(what ``start`` and the methods it reaches bind non-None or test, whether one catches AttributeError)."""
        found: set[str] = set()
        for m in self.reached(start):
            t = self.tested(m)
            if t is None:
                return found, True
            found |= self.direct(m)[0] | t
        return found, False


def state_use_orders(mod: ModuleFacts, methods: dict[str, dict[str, Method]], classes: dict[str, ast.ClassDef],
                     indexes: dict[int, BodyIndex]) -> list[RawOrder]:
    """``state_use``: a method that dereferences ``self.X`` unguarded (``self._sock.send(data)``), where X is unset
    until 1 to ``MAX_STATE_SETTERS`` other methods of its class bind it: without one of them first the call fails
    (``'NoneType' object has no attribute``). Unset: construction (the dunders of the class and of its same-module
    bases, whatever they call: a subclass's ``__init__`` is taken to call its base's) and the class body bind X to
    None or not at all, and an outside base cannot have set it (every base is in this module, or construction sets
    X to None). The guard pattern's implicit form; a method that tests X first copes with it unset, and one that
    binds it (itself or through what it calls) makes it: neither is a consumer."""
    orders: list[RawOrder] = []
    for cls, defs in methods.items():
        owners = _owners(mod, cls)
        node = classes.get(cls)
        if node is None:
            continue
        known = [b for b in mod.bases.get(cls, []) if b in _NO_STATE_BASES or b.startswith(mod.module + ".")]
        outside = sum(1 for b in node.bases if not _is_object(b)) - len(known)  # from elsewhere, or not resolved
        reach = _Reach(_family(mod, cls, methods), indexes)
        # cheap first: the state some method binds and no constructor binds itself; most classes have none, and
        # walking every method body for uses is the cost of this pattern
        settable = {a for name, (_, m) in reach.family.items() if not name.startswith("__") for a in reach.direct(m)[0]}
        settable -= {a for owner in owners for name, m in methods.get(owner, {}).items() if name.startswith("__")
                     for a in reach.direct(m)[0]}
        if not settable:
            continue
        used = {name: u for name, m in defs.items()
                if not name.startswith("__") and (u := _used(m, _first_param(m) or "", settable))}
        if not used:
            continue
        at_class, unset = set(), set()
        at_construction: set[str] = set()
        for owner in owners:
            bound_here, unset_here = _class_level(classes.get(owner))
            at_class |= bound_here
            unset |= unset_here
            for name, m in methods.get(owner, {}).items():
                if name.startswith("__"):
                    bound_here, unset_here = reach.binds(m)
                    at_construction |= bound_here
                    unset |= unset_here
        binds = _family_binds(mod, cls, methods, indexes)
        for consumer, attrs in used.items():
            made, catches = reach.copes(defs[consumer])  # lazy set-up or a check, itself or in what it calls
            if catches:
                continue
            for attr, stmt in attrs.items():
                if attr in at_class or attr in at_construction or attr in made or (outside and attr not in unset):
                    continue
                setters = [name for name, (_, bound) in binds.items() if attr in bound and not name.startswith("__")
                           and name != consumer]
                shared = len(setters) > MAX_STATE_SETTERS
                for name in setters:
                    owner, bound = binds[name]
                    orders.append(RawOrder(
                        _record_id(mod, f"{cls}.{consumer}", stmt, bound[attr]), f"{mod.module}.{cls}.{consumer}",
                        f"{mod.module}.{owner}.{name}", STATE_USE, True, True,
                        MineReason.SHARED_STATE if shared else None,
                        f"self.{attr} is set by {len(setters)} methods (> {MAX_STATE_SETTERS})" if shared
                        else f"{STATE_USE} of self.{attr}: {_said(stmt)} (unset until {name} binds it)"))
    return orders


def unset_module_globals(body: list[ast.stmt]) -> frozenset[str]:
    """Names a module's top level (if / try / with blocks included) binds only to None, and by nothing else."""
    unset, other = set(), set()
    for s in top_level_statements(body):
        if isinstance(s, (ast.Assign, ast.AnnAssign)) and s.value is not None and _is_none(s.value):
            targets = s.targets if isinstance(s, ast.Assign) else [s.target]
            if all(isinstance(t, ast.Name) for t in targets):
                unset.update(t.id for t in targets)  # type: ignore[attr-defined]
                continue
        other.update(bound_names([s]))
    return frozenset(unset - other)


def global_use_orders(mod: ModuleFacts, functions: dict[str, Method], indexes: dict[int, BodyIndex],
                      unset_globals: Container[str]) -> list[RawOrder]:
    """``state_use`` at module level: a function that dereferences a module global unguarded (``_client.get(k)``),
    where the module binds it only to None and 1 to ``MAX_STATE_SETTERS`` other functions declare it ``global``
    and bind it (``init()`` before ``get()``); not when the function binds or tests it, itself or in the module
    functions it calls, nor when it has a name of its own (a parameter or local) so called."""
    setters = _global_setters(functions, indexes, _is_none)
    if not setters:
        return []
    direct = {name: set(bound) for name, bound in setters.items()}
    calls = {name: {n.func.id for n in ast.walk(f) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                    and n.func.id in functions} for name, f in functions.items()}
    checks: dict[str, set[str] | None] = {}
    orders: list[RawOrder] = []
    for consumer, f in functions.items():
        used = _used(f, "", unset_globals)
        if not used:
            continue
        own = _own_names(f, indexes.get(id(f)) or index_body(f))
        made, seen, todo, catches = set(direct.get(consumer, ())), {consumer}, [consumer], False
        while todo:  # what it binds or checks through the functions it calls, at any depth
            for h in calls[todo.pop()] - seen:
                seen.add(h)
                todo.append(h)
                if h not in checks:
                    checks[h] = _tested(functions[h], "")
                checked = checks[h]
                catches = catches or checked is None
                made |= direct.get(h, set()) | (checked or set())
        if catches:
            continue
        for g, stmt in used.items():
            if g in own or g in made:
                continue
            names = [name for name, bound in setters.items()
                     if g in bound and name != consumer and not name.startswith("__")]
            shared = len(names) > MAX_STATE_SETTERS
            for name in names:
                orders.append(RawOrder(
                    _record_id(mod, consumer, stmt, setters[name][g]), f"{mod.module}.{consumer}",
                    f"{mod.module}.{name}",
                    STATE_USE, False, False, MineReason.SHARED_STATE if shared else None,
                    f"global {g} is set by {len(names)} functions (> {MAX_STATE_SETTERS})" if shared
                    else f"{STATE_USE} of global {g}: {_said(stmt)} (None until {name} binds it)"))
    return orders


# mappings that raise KeyError for a key never stored (not a defaultdict, which makes the entry)
_TABLE_TYPES = frozenset({"dict", "OrderedDict", "WeakValueDictionary", "WeakKeyDictionary"})


def _empty_table(value: ast.expr | None) -> bool:
    if isinstance(value, ast.Dict):
        return not value.keys
    if isinstance(value, ast.Call) and not value.args and not value.keywords:
        f = value.func
        return (f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else "") in _TABLE_TYPES
    return False


def _parameters(m: Method) -> set[str]:
    """The arguments a caller passes (the object itself left out)."""
    positional = [*m.args.posonlyargs, *m.args.args]
    return {a.arg for a in positional[1:]} | {a.arg for a in m.args.kwonlyargs}


def _key_of(node: ast.AST, owner: str, keys: Container[str]) -> tuple[str, str] | None:
    """(table attribute, how it is used) where ``node`` reads, deletes or stores ``self.X[key]`` for a ``key`` among
    ``keys``, or calls ``self.X.pop(key)`` / ``self.X.setdefault(key, ...)``; how: 'load' or 'store'."""
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Name) and node.slice.id in keys \
            and (attr := _attr_of(node.value, owner)):
        return attr, "store" if isinstance(node.ctx, ast.Store) else "load"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args \
            and isinstance(node.args[0], ast.Name) and node.args[0].id in keys \
            and (attr := _attr_of(node.func.value, owner)):
        if node.func.attr == "pop" and len(node.args) == 1 and not node.keywords:
            return attr, "load"
        if node.func.attr == "setdefault":
            return attr, "store"
    return None


def _table_copes(m: Method, owner: str) -> set[str]:
    """Tables of ``owner`` a method tests a key of (``k in self.X``), reads with a default (``self.X.get``) or
    stores into: it copes with a missing entry, or makes it (a lambda it hands on counts: ``wait_for(lambda:
    self.X.get(k))`` waits for the entry)."""
    found: set[str] = set()
    for n in ast.walk(m):
        if isinstance(n, ast.Compare) and any(isinstance(o, (ast.In, ast.NotIn)) for o in n.ops):
            found.update(a for c in n.comparators if (a := _attr_of(c, owner)))
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("get", "setdefault") \
                and (a := _attr_of(n.func.value, owner)):
            found.add(a)
        elif isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store) and (a := _attr_of(n.value, owner)):
            found.add(a)
    return found


def _needs_entry(m: Method, owner: str, keys: Container[str], table: str) -> bool:
    """Whether a method reads an entry of ``table`` under one of its parameters where it always runs, or refuses
    to run without one (``if key not in self.X: raise``): it updates entries, it does not make them."""
    for _, part in _runs_always(m.body):
        if any(_key_of(n, owner, keys) == (table, "load") for n in _walk_own(part)):
            return True
    for s in _straight(m.body):
        if isinstance(s, ast.If) and not s.orelse and any(isinstance(b, ast.Raise) for b in s.body) \
                and isinstance(s.test, ast.Compare) and isinstance(s.test.left, ast.Name) and s.test.left.id in keys \
                and any(isinstance(o, ast.NotIn) for o in s.test.ops) \
                and any(_attr_of(c, owner) == table for c in s.test.comparators):
            return True
    return False


def keyed_state_orders(mod: ModuleFacts, methods: dict[str, dict[str, Method]],
                       indexes: dict[int, BodyIndex]) -> list[RawOrder]:
    """``keyed_state``: a method that reads one entry of a table its class fills, ``self.X[key]`` with ``key`` its
    parameter, unguarded where it always runs (or ``del``s or ``pop``s it), where construction binds X to an empty
    mapping and nothing else rebinds it, and 1 to ``MAX_STATE_SETTERS`` other public methods store entries of X
    under a parameter of theirs (``self.X[name] = ...``): without one of them first, for that key, the call raises
    ``KeyError``. A method that tests the key, reads with a default or stores into X, itself or through any chain of
    ``self.h()`` calls, is no consumer; one that needs the entry itself (reads it first, or raises without it) is no
    producer."""
    orders: list[RawOrder] = []
    for cls, defs in methods.items():
        family = _family(mod, cls, methods)
        tables: set[str] = set()
        rebound: set[str] = set()
        for name, (_, m) in family.items():
            owner = _first_param(m) or ""
            for a in (indexes.get(id(m)) or index_body(m)).attr_assigns:  # parse's one walk of the body
                for t in a.targets if isinstance(a, ast.Assign) else [a.target]:
                    if (attr := _attr_of(t, owner)) is None:
                        continue
                    if not _empty_table(a.value):
                        rebound.add(attr)
                    elif name.startswith("__"):
                        tables.add(attr)
        tables -= rebound  # a table replaced by a filled one may hold entries no store of ours made
        if not tables:
            continue
        stores: dict[str, dict[str, ast.AST]] = {}  # table -> public method -> its store
        fillers: dict[str, set[int]] = {}  # table -> every method of the family that stores into it (by id)
        for name, (_, m) in family.items():
            keys, owner = _parameters(m), _first_param(m) or ""
            bumped = {id(n.target) for n in _walk_own(m) if isinstance(n, ast.AugAssign)}  # += needs the entry
            first: dict[str, ast.AST] = {}  # table -> this method's first store into it
            for n in _walk_own(m):
                if id(n) not in bumped and (key_use := _key_of(n, owner, keys)) and key_use[0] in tables \
                        and key_use[1] == "store":
                    first.setdefault(key_use[0], n)
            for table, n in first.items():
                fillers.setdefault(table, set()).add(id(m))
                if not name.startswith("_") and not _needs_entry(m, owner, keys, table):
                    stores.setdefault(table, {})[name] = n
        if not stores:
            continue
        reach = _Reach(family, indexes)
        for consumer, m in defs.items():
            if consumer.startswith("_"):
                continue
            keys, owner = _parameters(m), _first_param(m) or ""
            used: dict[str, ast.stmt] = {}  # table -> the first statement that reads an entry of it
            for stmt, part in _runs_always(m.body):
                for n in _walk_own(part):
                    if (key_use := _key_of(n, owner, keys)) and key_use[1] == "load" and key_use[0] in stores:
                        used.setdefault(key_use[0], stmt)
            coped = _table_copes(m, owner) if used else set()
            reached = {id(h) for h in reach.reached(m)} - {id(m)} if used else set()
            for table, stmt in used.items():
                if table in coped or reached & fillers.get(table, set()):  # add_edge calls add_node itself
                    continue
                setters = [name for name in stores[table] if name != consumer]
                shared = len(setters) > MAX_STATE_SETTERS
                for name in setters:
                    orders.append(RawOrder(
                        _record_id(mod, f"{cls}.{consumer}", stmt, stores[table][name]),  # type: ignore[arg-type]
                        f"{mod.module}.{cls}.{consumer}", f"{mod.module}.{family[name][0]}.{name}", KEYED_STATE,
                        True, True, MineReason.SHARED_STATE if shared else None,
                        f"self.{table} is filled by {len(setters)} methods (> {MAX_STATE_SETTERS})" if shared
                        else f"{KEYED_STATE} of self.{table}: {_said(stmt)} (no entry until {name} stores one)"))
    return orders


def _is_object(base: ast.expr) -> bool:
    return isinstance(base, ast.Name) and base.id == "object"
