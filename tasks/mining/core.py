"""Mine producer -> consumer dependency pairs from the data flow of Python code (no LLM).

Inside a function body, the value returned by a documented function ``f`` that reaches an argument
of a documented function ``g`` says "g depends on f": directly (``g(f(x))``) or through a local
variable (``v = f(x); ...; g(v)``, the latest assignment of ``v`` before the call in the same body).

Two phases, so the costly one runs in parallel:

* parse (worker processes, one file at a time): a module's functions (:class:`FunctionFacts`), its
  import table and every *candidate* flow with both call targets written as qualified names
  through the module's own definitions and imports (``c.f`` after ``import a.b as c`` is ``a.b.f``);
* resolve (parent): qualified names to functions across all modules, following re-exports through
  package ``__init__`` import tables, then the rules that accept or reject each candidate.

Every candidate ends accepted or rejected with a reason (:class:`MineReason`); the counts add up.
"""
from __future__ import annotations

import ast
import builtins
import contextlib
import functools
import gc
import io
import os
import sys
import sysconfig
import tokenize
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

from tasks.mining.docs import BodyIndex, FunctionFacts, ParamFacts, child_nodes, doc_from_facts, function_facts, index_body

SKIP_DIRS = frozenset({"__pycache__", "idlelib", "lib2to3", "site-packages", ".git", "node_modules"})
TEST_DIRS = frozenset({"test", "tests", "testing"})  # read for their flows only: their functions are never tools
MAX_FILE_BYTES = 1_000_000
MAX_REEXPORT_HOPS = 4
MAX_STAR_SOURCES = 16  # star imports fan out: followed MAX_STAR_DEPTH hops deep, this many modules each
MAX_STAR_DEPTH = 3
# names a stdlib module binds per platform in if/else branches (the last branch would win): the running one's
_PLATFORM_IMPORTS = {"os": {"path": os.path.__name__}}
MODULE_BODY = "<module>"  # the qualname of a module's top-level statements in record ids
_BUILTINS = frozenset(dir(builtins))


class MineReason:
    """Rejection reason codes of candidates and source files (stable strings, stored in records.duckdb)."""

    # source files
    UNREADABLE_FILE = "unreadable_file"
    BAD_ENCODING = "bad_encoding"
    SYNTAX_ERROR = "syntax_error"
    FILE_TOO_LARGE = "file_too_large"
    DUPLICATE_MODULE = "duplicate_module"  # a second file with a module name already read
    # candidates
    TUPLE_UNPACK = "tuple_unpack"  # ``a, b = f(x); g(a)``: which element flows is unknown
    LOOP_ITEM = "loop_item"  # ``for a in f(x): g(a)``: f is not known to give a collection of like items
    UNRESOLVED_TARGET = "unresolved_target"  # a local, builtin, attribute of an object, missing module...
    AMBIGUOUS_TARGET = "ambiguous_target"  # defined twice (conditional defs) or module read twice
    UNDOCUMENTED_PRODUCER = "undocumented_producer"
    UNDOCUMENTED_CONSUMER = "undocumented_consumer"
    PRODUCER_RETURNS_NOTHING = "producer_returns_nothing"  # no ``return <value>``: nothing flows
    SELF_FLOW = "self_flow"  # g(g(x)): a function does not depend on itself
    BAD_ARGUMENT_POSITION = "bad_argument_position"  # positional index beyond the signature, unknown keyword
    UNDOCUMENTED_PARAMETER = "undocumented_parameter"  # reaches *args/**kwargs the doc does not list
    DUPLICATE_FLOW = "duplicate_flow"  # same (consumer, producer) as an accepted candidate
    GENERIC_SINK = "generic_sink"  # the parameter takes values from too many producers (assert_equal, dumps, latex)


# -- parse phase (runs in workers) ---------------------------------------------------------------
class RawFlow(NamedTuple):
    """A candidate flow as the parser sees it; targets are qualified names or None."""

    record_id: str  # module:function:line:col:slot
    consumer: str | None
    producer: str | None
    slot: str  # the argument: "0", "1", ... (positional) or a keyword name
    via: str  # direct | variable
    bound: bool  # the consumer was called through self./cls. (first parameter already bound)
    reason: str | None  # a rejection known at parse time
    detail: str
    unpack: int = 0  # ``a, b = f(x); g(a)``: the number of names unpacked; -1: ``for a in f(x)``; 0: the whole value flows


@dataclass
class ModuleFacts:
    module: str
    origin: str  # stdlib | site-packages | tree | codesearchnet
    path: str
    is_package: bool
    source_id: str = ""  # the file (or function record) read: its id in the books
    functions: dict[str, FunctionFacts] = field(default_factory=dict)  # by qualname in the module
    duplicated: set[str] = field(default_factory=set)  # qualnames defined more than once
    classes: set[str] = field(default_factory=set)
    bases: dict[str, list[str]] = field(default_factory=dict)  # class -> qualified base names (for inherited methods)
    imports: dict[str, str] = field(default_factory=dict)  # local name -> qualified target
    star_imports: list[str] = field(default_factory=list)  # modules of ``from m import *``, in order
    flows: list[RawFlow] = field(default_factory=list)
    flows_only: bool = False  # test code (FileItem.flows_only): not a module that names resolve to
    assigned: list[tuple[str, str]] = field(default_factory=list)  # (callee, variable) of ``variable = callee(...)``
    # names bound once at module level: ``log = Logger(...)`` / ``log: Logger`` (type string) and
    # ``CONFIG = load_config(...)`` (the qualified callee whose value the name holds)
    global_types: dict[str, str] = field(default_factory=dict)
    global_values: dict[str, str] = field(default_factory=dict)
    # class -> self.<attr> -> type string, where every binding in the class agrees (``_class_attr_types``);
    # class -> every attribute the class binds (typed or not): a subclass's binding hides the base's type
    attr_types: dict[str, dict[str, str]] = field(default_factory=dict)
    attr_bound: dict[str, frozenset[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class FileRejection:
    record_id: str  # file:<origin>:<path>
    reason: str
    detail: str


@dataclass(frozen=True)
class FileItem:
    path: str
    module: str
    is_package: bool
    origin: str
    flows_only: bool = False  # test code: its flows between library functions count, its own functions are no targets


def _import_base(module: str, is_package: bool, level: int) -> str | None:
    parts = module.split(".") if is_package else module.split(".")[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)] if len(parts) >= level - 1 else None
    return ".".join(parts) if parts is not None else None


def _bind_import(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, table: dict[str, str]) -> None:
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.asname:
                table[alias.asname] = alias.name
            else:
                top = alias.name.split(".")[0]
                table[top] = top
        return
    if node.level:
        base = _import_base(module, is_package, node.level)
        if base is None:
            return
        source = ".".join(p for p in (base, node.module or "") if p)
    else:
        source = node.module or ""
    for alias in node.names:
        if alias.name != "*" and source:
            table[alias.asname or alias.name] = f"{source}.{alias.name}"


def _top_level_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Module statements, descending into if/try/with blocks (conditional imports and defs)."""
    for node in body:
        yield node
        if isinstance(node, (ast.If, ast.Try, ast.With, ast.AsyncWith)) or node.__class__.__name__ == "TryStar":
            for name in ("body", "orelse", "finalbody"):
                yield from _top_level_statements(getattr(node, name, None) or [])
            for handler in getattr(node, "handlers", None) or []:
                yield from _top_level_statements(handler.body)


def _store_names(target: ast.AST) -> Iterator[str]:
    for n in ast.walk(target):
        if isinstance(n, ast.Name):
            yield n.id


def _unwrap(expr: ast.expr) -> ast.expr:
    return expr.value if isinstance(expr, ast.Await) else expr


def _calls_in(expr: ast.AST) -> Iterator[ast.Call]:
    """Calls inside an expression in evaluation-ish order, not entering lambdas."""
    stack = [expr]
    found = []
    while stack:
        n = stack.pop()
        cls = n.__class__
        if cls is ast.Lambda:
            continue
        if cls is ast.Call:
            found.append(n)
        stack.extend(child_nodes(n))
    if len(found) > 1:
        found.sort(key=lambda c: (c.lineno, c.col_offset))
    return iter(found)


def _looks_like_class(qualified: str) -> bool:
    last = qualified.rsplit(".", 1)[-1]
    return last[:1].isupper() and not last.isupper()


def _type_of_call(callee: str) -> str:
    """Type string of a call's value: the class for ``Foo(...)``, else ``f()`` (what ``f`` returns,
    read from its return annotation, or from its body, when the names are resolved)."""
    return callee if _looks_like_class(callee) else f"{callee}()"


# builtins whose result is the argument's data in another container or form (looked through like await)
_VALUE_BUILTINS = frozenset({"list", "tuple", "set", "frozenset", "sorted", "dict", "iter", "str", "bytes", "int", "float"})
_CASTS = frozenset({"typing.cast", "typing_extensions.cast"})
_OPTIONAL = frozenset({"Optional", "typing.Optional", "t.Optional", "typing_extensions.Optional"})
_UNION = frozenset({"Union", "typing.Union", "t.Union", "typing_extensions.Union"})
_WRAPPERS = frozenset({"Annotated", "typing.Annotated", "typing_extensions.Annotated", "Final", "typing.Final",
                       "ClassVar", "typing.ClassVar"})


def _annotated_class(expr: ast.AST | None, depth: int = 0) -> str | None:
    """The one class an annotation names, as written: ``Foo``, ``"Foo"``, ``mod.Foo``, ``Optional[Foo]``,
    ``Foo | None``, ``Union[Foo, None]``, ``Annotated[Foo, ...]``; None for anything else (generics,
    unions of two classes, ...)."""
    if expr is None or depth > 3:
        return None
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        try:
            return _annotated_class(ast.parse(expr.value.strip(), mode="eval").body, depth + 1)
        except (SyntaxError, ValueError, RecursionError):
            return None
    if isinstance(expr, (ast.Name, ast.Attribute)):
        dotted = _dotted(expr)
        return None if dotted in ("None", "Any", "typing.Any", "object") else dotted
    if isinstance(expr, ast.Subscript):
        base = _dotted(expr.value) or ""
        items = list(expr.slice.elts) if isinstance(expr.slice, ast.Tuple) else [expr.slice]
        if base in _OPTIONAL:
            return _annotated_class(items[0], depth + 1)
        if base in _WRAPPERS:
            return _annotated_class(items[0], depth + 1)
        if base in _UNION:
            return _one_member(items, depth)
        return None
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.BitOr):
        members: list[ast.expr] = []
        stack: list[ast.expr] = [expr]
        while stack:
            n = stack.pop()
            if isinstance(n, ast.BinOp) and isinstance(n.op, ast.BitOr):
                stack += [n.right, n.left]
            else:
                members.append(n)
        return _one_member(members, depth)
    return None


def _one_member(members: list[ast.expr], depth: int) -> str | None:
    rest = [m for m in members if not (isinstance(m, ast.Constant) and m.value is None) and _dotted(m) != "None"]
    return _annotated_class(rest[0], depth + 1) if len(rest) == 1 else None


def annotation_class(text: str | None) -> str | None:
    """:func:`_annotated_class` of an annotation kept as text (``FunctionFacts.return_annotation``)."""
    if not text:
        return None
    try:
        return _annotated_class(ast.parse(text.strip(), mode="eval").body)
    except (SyntaxError, ValueError, RecursionError):
        return None


@dataclass
class _ClassFlows:
    """``self.x = f(...)`` bound exactly once in a class: ``g(self.x)`` in any of its methods gets f's value."""

    attr_bindings: Counter[str]  # how often each self.<attr> is bound (assigned, deleted) in the class
    bound: dict[str, tuple[str | None, bool, str]] = field(default_factory=dict)  # attr -> resolved producer
    pending: list[tuple[str, tuple[str | None, bool, str], str, str]] = field(default_factory=list)  # (record id, consumer, slot, attr)

    def flows(self) -> Iterator[RawFlow]:
        for record_id, consumer, slot, attr in self.pending:
            if attr not in self.bound:
                continue  # its one binding is not a call: nothing flows
            producer = self.bound[attr]
            reason, detail = None, f"self.{attr} bound once in the class"
            if consumer[0] is None:
                reason, detail = MineReason.UNRESOLVED_TARGET, f"consumer: {consumer[2]}"
            elif producer[0] is None:
                reason, detail = MineReason.UNRESOLVED_TARGET, f"producer: {producer[2]}"
            yield RawFlow(record_id, consumer[0], producer[0], slot, "attribute_once", consumer[1], reason, detail)


def _attr_bindings(cls: ast.ClassDef, indexes: dict[int, BodyIndex]) -> Counter[str]:
    """How often each ``self.<attr>`` is bound in the methods of ``cls`` (class-level names count too)."""
    counts: Counter[str] = Counter(_bound_names(_top_level_statements(cls.body)))
    for method in cls.body:
        if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) and method.args.args:
            counts.update((indexes.get(id(method)) or index_body(method)).attr_binds)  # properties too
    return counts


class _BodyScanner:
    """Straight-line reaching definitions of one function body, emitting candidate flows."""

    def __init__(self, mod: ModuleFacts, node: ast.FunctionDef | ast.AsyncFunctionDef, qualname: str,
                 class_name: str | None, module_defs: set[str], guess_same_module: bool,
                 attr_types: dict[str, str] | None = None, enclosing: _BodyScanner | None = None,
                 class_flows: _ClassFlows | None = None, index: BodyIndex | None = None):
        self.mod, self.qualname, self.class_name = mod, qualname, class_name
        self.class_flows = enclosing.class_flows if enclosing is not None else class_flows
        self.module_defs, self.guess = module_defs, guess_same_module
        self.attr_types = attr_types or {}  # self.<attr> -> type string of the class
        a = node.args
        positional = [*a.posonlyargs, *a.args]
        decorators = {_dotted(d) for d in node.decorator_list}
        if enclosing is not None:  # a nested def sees its enclosing method's self
            self.self_name, self.binding = enclosing.self_name, enclosing.binding
        elif class_name and positional and "staticmethod" not in decorators:
            self.self_name = positional[0].arg
            self.binding = "class" if "classmethod" in decorators else "instance"
        else:
            self.self_name, self.binding = None, "function"
        params = {p.arg for p in [*positional, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x)]}
        index = index or index_body(node)
        # names bound in the body (nested def and class names too): never the module-level ones
        self.locals = params | index.stores | index.scoped | (enclosing.locals if enclosing is not None else set())
        self.local_imports: dict[str, str] = dict(enclosing.local_imports) if enclosing is not None else {}
        # name -> (the producing call, element index, items unpacked): index/items are None for the
        # whole value, (i, n) for ``a, b = f()``, (None, 0) for an unpacking whose element is unknown
        self.env: dict[str, tuple[ast.Call, int | None, int | None]] = {}
        # name -> type string: ``x = Foo(...)`` or ``x: Foo`` makes ``x.m()`` a call of ``Foo.m``
        self.types: dict[str, str] = {}
        # name -> (qualified target, bound): ``fn = self.method`` / ``fn = mod.func`` makes ``fn()`` that call
        self.aliases: dict[str, tuple[str, bool]] = {}
        for p in [*positional, *a.kwonlyargs]:
            if p.arg == self.self_name:
                continue
            resolved = self._annotation_type(p.annotation)
            if resolved:
                self.types[p.arg] = resolved

    # name resolution -------------------------------------------------------------------------
    def _annotation_type(self, annotation: ast.AST | None) -> str | None:
        dotted = _annotated_class(annotation)
        return self._resolve_global(dotted) if dotted else None

    def _resolve_global(self, dotted: str) -> str | None:
        head, _, tail = dotted.partition(".")
        base = self.local_imports.get(head) or self.mod.imports.get(head)
        if base is None and head in self.module_defs:
            base = f"{self.mod.module}.{head}"
        if base is None:
            return None
        return f"{base}.{tail}" if tail else base

    def _resolve_name(self, name: str) -> tuple[str | None, str]:
        if name in self.local_imports:
            return self.local_imports[name], ""
        if name in self.locals:
            return None, f"local variable {name}"
        if name in self.mod.imports:
            return self.mod.imports[name], ""
        if name in self.module_defs or name in self.mod.global_types:
            return f"{self.mod.module}.{name}", ""
        if name in _BUILTINS:
            return None, f"builtin {name}"
        if self.guess:  # a lone function record: the name is another record of the same file
            return f"{self.mod.module}.{name}", ""
        return None, f"unknown name {name}"

    def resolve(self, func: ast.expr) -> tuple[str | None, bool, str]:
        """(qualified target or None, called through self/cls, why not resolved)."""
        chain: list[str] = []
        while isinstance(func, ast.Attribute):
            chain.append(func.attr)
            func = func.value
        own_class = f"{self.mod.module}.{self.class_name}" if self.class_name else None
        if isinstance(func, ast.Call) and isinstance(func.func, ast.Name) and own_class and func.func.id in ("super", "type"):
            if func.func.id == "super" and len(chain) == 1:
                return f"{own_class}.<super>.{chain[0]}", True, ""
            if (func.func.id == "type" and not chain and len(func.args) == 1 and isinstance(func.args[0], ast.Name)
                    and func.args[0].id == self.self_name and self.binding == "instance"):
                return own_class, False, ""  # type(self)(...): a new instance of the class
        if isinstance(func, ast.Call) and len(chain) == 1:  # Foo(x).m(), f(x).m(): a method of the call's value
            inner, _, why = self.resolve(func.func)
            if inner is None:
                return None, False, f"method {chain[0]} of a call: {why}"
            return f"{_type_of_call(inner)}.{chain[0]}", True, ""
        if not isinstance(func, ast.Name):
            return None, False, f"call on a {type(func).__name__} expression"
        chain.reverse()
        if func.id == self.self_name and own_class:
            if not chain and self.binding == "class":
                return own_class, False, ""  # cls(...) in a classmethod: the class's constructor
            if chain == ["__class__"] and self.binding == "instance":
                return own_class, False, ""  # self.__class__(...)
            if len(chain) == 1:
                return f"{own_class}.{chain[0]}", True, ""
            if len(chain) == 2 and chain[0] in self.attr_types:
                return f"{self.attr_types[chain[0]]}.{chain[1]}", True, ""
            if len(chain) == 2 and self.class_flows is not None and not self.class_flows.attr_bindings.get(chain[0]):
                return f"{own_class}.<attr>.{chain[0]}.{chain[1]}", True, ""  # bound in a base class, if anywhere
            if chain:
                return None, False, f"attribute of {func.id}: {func.id}.{'.'.join(chain)}"
        if len(chain) <= 1 and func.id in self.types:  # x.m() -> Type.m; x() -> Type.__call__
            return f"{self.types[func.id]}.{chain[0] if chain else '__call__'}", True, ""
        if len(chain) == 2 and func.id in self.types:  # x.a.m(): m of the type of Type's attribute a
            return f"{self.types[func.id]}.<attr>.{chain[0]}.{chain[1]}", True, ""
        if (len(chain) == 1 and func.id in self.mod.global_types and func.id not in self.locals
                and func.id not in self.local_imports):  # ``log = Logger(...)`` bound once at module level
            return f"{self.mod.global_types[func.id]}.{chain[0]}", True, ""
        if func.id in self.aliases:
            target, bound = self.aliases[func.id]
            return ".".join([target, *chain]), bound and not chain, ""
        base, why = self._resolve_name(func.id)
        if base is None:
            return None, False, why
        return ".".join([base, *chain]), False, ""

    def _through(self, expr: ast.expr) -> tuple[ast.expr, bool]:
        """``await x``, ``list(x)``, ``str(x)``, ``sorted(x, key=k)``...: the value inside (a conversion
        keeps the data, not the type). Returns (inner expression, converted)."""
        converted = False
        while True:
            if isinstance(expr, ast.Await):
                expr = expr.value
            elif (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in _VALUE_BUILTINS
                  and len(expr.args) == 1 and not isinstance(expr.args[0], ast.Starred)
                  and (not expr.keywords or expr.func.id == "sorted" and all(k.arg in ("key", "reverse") for k in expr.keywords))
                  and self._is_builtin(expr.func.id)):
                expr, converted = expr.args[0], True
            elif (isinstance(expr, ast.Call) and len(expr.args) == 2 and not expr.keywords and isinstance(expr.func, (ast.Name, ast.Attribute))
                  and _dotted(expr.func) in ("cast", "typing.cast", "t.cast") and self.resolve(expr.func)[0] in _CASTS):
                expr = expr.args[1]  # typing.cast(T, v) is v
            else:
                return expr, converted

    def _is_builtin(self, name: str) -> bool:
        return not (name in self.locals or name in self.local_imports or name in self.mod.imports or name in self.module_defs
                    or name in self.mod.global_types or name in self.mod.global_values)

    # scanning --------------------------------------------------------------------------------
    def scan(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            self._stmt(stmt)

    def _kill(self, names: Iterable[str]) -> None:
        for n in names:
            self.env.pop(n, None)
            self.types.pop(n, None)
            self.aliases.pop(n, None)

    def _expr(self, expr: ast.AST | None) -> None:
        if expr is None:
            return
        for call in _calls_in(expr):
            self._call(call)

    def _stmt(self, s: ast.stmt) -> None:
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and self.qualname == MODULE_BODY:
            self._kill([s.name])  # module-level defs are scanned on their own
            return
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self._kill([s.name])
            nested = _BodyScanner(self.mod, s, f"{self.qualname}.<locals>.{s.name}", self.class_name, self.module_defs,
                                  self.guess, self.attr_types, enclosing=self)
            nested.scan(s.body)  # its own body, its own straight line
            return
        if isinstance(s, ast.ClassDef):
            self._kill([s.name])
            return
        if isinstance(s, (ast.Import, ast.ImportFrom)):
            before = dict(self.local_imports)
            _bind_import(s, self.mod.module, self.mod.is_package, self.local_imports)
            self._kill(k for k in self.local_imports if before.get(k) != self.local_imports[k])
            return
        if isinstance(s, (ast.If, ast.While)):
            self._expr(s.test)
            self.scan(s.body)
            self.scan(s.orelse)
        elif isinstance(s, (ast.For, ast.AsyncFor)):
            self._expr(s.iter)
            self._kill(_store_names(s.target))
            self._loop_items(s.target, s.iter)
            self.scan(s.body)
            self.scan(s.orelse)
        elif isinstance(s, (ast.With, ast.AsyncWith)):
            for item in s.items:
                self._expr(item.context_expr)
                if item.optional_vars is not None:
                    self._kill(_store_names(item.optional_vars))
                    value = _unwrap(item.context_expr)
                    if isinstance(item.optional_vars, ast.Name) and isinstance(value, ast.Call):
                        callee = self.resolve(value.func)[0]  # ``with Foo() as x``: x is what Foo.__enter__ returns
                        if callee:
                            enter = "__aenter__" if isinstance(s, ast.AsyncWith) else "__enter__"
                            self.types[item.optional_vars.id] = f"{_type_of_call(callee)}.{enter}()"
            self.scan(s.body)
        elif isinstance(s, ast.Try) or s.__class__.__name__ == "TryStar":
            self.scan(s.body)
            for h in s.handlers:
                if h.name:
                    self._kill([h.name])
                self.scan(h.body)
            self.scan(s.orelse)
            self.scan(s.finalbody)
        elif isinstance(s, ast.Match):
            self._expr(s.subject)
            for case in s.cases:
                self._kill(_store_names(case.pattern))
                self.scan(case.body)
        elif isinstance(s, ast.Assign):
            self._expr(s.value)
            value, converted = self._through(s.value)
            for target in s.targets:
                self._bind(target, value, converted)
        elif isinstance(s, ast.AnnAssign):
            self._expr(s.value)
            if s.value is not None:
                self._bind(s.target, *self._through(s.value))
            if isinstance(s.target, ast.Name):  # ``x: Foo = ...``: the annotation says the type
                annotated = self._annotation_type(s.annotation)
                if annotated:
                    self.types[s.target.id] = annotated
        elif isinstance(s, ast.AugAssign):
            self._expr(s.value)
            self._kill(_store_names(s.target))
        elif isinstance(s, ast.Delete):
            for t in s.targets:
                self._kill(_store_names(t))
        else:  # Expr, Return, Raise, Assert, ...: calls only
            for child in ast.iter_child_nodes(s):
                self._expr(child)

    def _bind(self, target: ast.AST, value: ast.expr, converted: bool = False) -> None:
        """``target = value``; ``converted``: value was inside ``list(...)``, ``str(...)``...: the data
        flows on, the type and any alias do not."""
        if isinstance(target, ast.Name):
            name = target.id
            old = (self.env.get(value.id), self.types.get(value.id), self.aliases.get(value.id)) if isinstance(value, ast.Name) else None
            self._kill([name])  # reassignment kills the flow, the type and the alias
            if isinstance(value, ast.Call):
                self.env[name] = (value, None, None)
                callee, _, _ = self.resolve(value.func)
                if callee and not converted:
                    self.types[name] = _type_of_call(callee)
                    self.mod.assigned.append((callee, name))  # what callers call the result
            elif old is not None:  # ``w = v``: w holds what v holds
                if old[0] is not None:
                    self.env[name] = old[0]
                if not converted:
                    if old[1] is not None:
                        self.types[name] = old[1]
                    if old[2] is not None:
                        self.aliases[name] = old[2]
                    if old == (None, None, None) and value.id not in self.locals:
                        self._alias(name, value)
            elif isinstance(value, ast.Attribute) and not converted:
                self._alias(name, value)
        elif isinstance(target, (ast.Tuple, ast.List)):
            names = list(_store_names(target))
            self._kill(names)
            if isinstance(value, ast.Call):
                flat = all(isinstance(e, ast.Name) for e in target.elts)  # a, b = f(): element i is known
                for i, name in enumerate(names):
                    self.env[name] = (value, i, len(names)) if flat else (value, None, 0)
        elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == self.self_name:
            key = f"{self.self_name}.{target.attr}"  # self.x = f(...); ...; g(self.x)
            if isinstance(value, ast.Call):
                self.env[key] = (value, None, None)
            else:
                self.env.pop(key, None)
            if self.class_flows is not None and self.class_flows.attr_bindings.get(target.attr) == 1 and isinstance(value, ast.Call):
                self.class_flows.bound[target.attr] = self.resolve(value.func)  # the one binding of self.x in the class
        # other attributes and subscripts hold no local flow

    def _loop_items(self, target: ast.expr, iterable: ast.expr) -> None:
        """``for x in f(...)`` / ``for i, x in enumerate(f(...))``: x is an item of f's value
        (``unpack`` -1; the resolve phase keeps it only when f is known to give items)."""
        inner, _ = self._through(iterable)
        if (isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name) and inner.func.id == "enumerate"
                and len(inner.args) == 1 and not inner.keywords and self._is_builtin("enumerate")
                and isinstance(target, ast.Tuple) and len(target.elts) == 2):
            inner, target = self._through(inner.args[0])[0], target.elts[1]
        if not isinstance(target, ast.Name):
            return
        if isinstance(inner, ast.Call):
            self.env[target.id] = (inner, None, -1)
        elif isinstance(inner, ast.Name) and inner.id in self.env and self.env[inner.id][2] is None:
            self.env[target.id] = (self.env[inner.id][0], None, -1)

    def _alias(self, name: str, value: ast.expr) -> None:
        """``fn = self.method`` / ``fn = mod.func`` / ``K = SomeClass``: a later ``fn(...)`` calls that target."""
        target, bound, _ = self.resolve(value)
        if target is not None:
            self.aliases[name] = (target, bound)

    def _call(self, call: ast.Call) -> None:
        slots: list[tuple[str, ast.expr]] = []
        for i, arg in enumerate(call.args):
            if isinstance(arg, ast.Starred):
                break  # positions after a *splat are unknown
            slots.append((str(i), arg))
        slots += [(kw.arg, kw.value) for kw in call.keywords if kw.arg is not None]
        consumer: tuple[str | None, bool, str] | None = None
        for slot, arg in slots:
            arg, _ = self._through(arg)
            index: int | None = None
            unpack: int | None = None
            producer: tuple[str | None, bool, str] | None = None
            if isinstance(arg, ast.Call):
                producer_call, via = arg, "direct"
            elif isinstance(arg, ast.Name) and arg.id in self.env:
                producer_call, index, unpack = self.env[arg.id]
                via = "variable" if unpack is None else "loop_item" if unpack == -1 else "tuple_element"
            elif (isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name) and arg.value.id == self.self_name
                  and f"{self.self_name}.{arg.attr}" in self.env):
                producer_call, _, _ = self.env[f"{self.self_name}.{arg.attr}"]
                via = "attribute"
            elif (isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name) and arg.value.id == self.self_name
                  and self.class_flows is not None and self.class_flows.attr_bindings.get(arg.attr) == 1):
                if consumer is None:
                    consumer = self.resolve(call.func)
                record_id = f"{self.mod.module}:{self.qualname}:{call.lineno}:{call.col_offset}:{slot}"
                self.class_flows.pending.append((record_id, consumer, slot, arg.attr))  # decided once the class is read
                continue
            elif (isinstance(arg, ast.Name) and arg.id not in self.locals and arg.id not in self.local_imports
                  and arg.id in self.mod.global_values):
                producer, via = (self.mod.global_values[arg.id], False, ""), "global"  # CONFIG = load(...) at module level
            else:
                continue
            if consumer is None:
                consumer = self.resolve(call.func)
            if producer is None:
                producer = self.resolve(producer_call.func)
            record_id = f"{self.mod.module}:{self.qualname}:{call.lineno}:{call.col_offset}:{slot}"
            reason, detail = None, ""
            if unpack == 0:
                reason, detail = MineReason.TUPLE_UNPACK, "the argument is one element of a nested or starred unpacking"
            elif consumer[0] is None:
                reason, detail = MineReason.UNRESOLVED_TARGET, f"consumer: {consumer[2]}"
            elif producer[0] is None:
                reason, detail = MineReason.UNRESOLVED_TARGET, f"producer: {producer[2]}"
            elif unpack == -1:
                detail = "an item of the value iterated"
            elif unpack:
                detail = f"element {index} of {unpack}"
            self.mod.flows.append(RawFlow(record_id, consumer[0], producer[0], slot, via, consumer[1], reason, detail, unpack or 0))


def _constructor_facts(cls: ast.ClassDef, indexes: dict[int, BodyIndex] | None = None) -> FunctionFacts:
    """A class call as a tool: __init__'s parameters (else __new__'s, else the public annotated fields
    of a dataclass-like body, ``ClassVar`` left out), the class docstring (else __init__'s), and one
    output, the instance."""
    methods = {n.name: n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    init = methods.get("__init__") or methods.get("__new__")
    doc = ast.get_docstring(cls, clean=True) or ""
    if init is not None:
        facts = function_facts(init, cls.name, True, (indexes or {}).get(id(init)))
        params = facts.params
        doc = doc or facts.docstring
    else:
        params = tuple(
            ParamFacts(n.target.id, _annotation(n.annotation), "positional")
            for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.simple
            and not n.target.id.startswith("_") and "ClassVar" not in (_dotted(getattr(n.annotation, "value", n.annotation)) or "")
        )
    known = init is not None or bool(params) or not cls.bases
    return FunctionFacts(cls.name, doc, params, cls.name, True, cls.lineno, "function", params_known=known)


def _annotation(node: ast.AST) -> str | None:
    try:
        return ast.unparse(node)
    except Exception:
        return None


def _dotted(expr: ast.AST) -> str | None:
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    return ".".join([expr.id, *reversed(parts)])


def _qualify(mod: ModuleFacts, dotted: str, module_defs: set[str]) -> str | None:
    head, _, tail = dotted.partition(".")
    if head in mod.imports:
        base = mod.imports[head]
    elif head in module_defs:
        base = f"{mod.module}.{head}"
    else:
        return None
    return f"{base}.{tail}" if tail else base


def _class_attr_types(cls: ast.ClassDef, mod: ModuleFacts, module_defs: set[str], indexes: dict[int, BodyIndex]) -> dict[str, str]:
    """``attr: Foo`` in the class body, and in its methods ``self.attr = Foo(...)`` / ``= f(...)``,
    ``self.attr: Foo = ...`` and ``self.attr = p`` for a parameter ``p: Foo``, so ``self.attr.m()``
    resolves; an attribute that is given two different types, or any value of unknown type, is left out."""
    found: dict[str, set[str | None]] = {}

    def annotated(node: ast.AST | None) -> str | None:
        dotted = _annotated_class(node)
        return _qualify(mod, dotted, module_defs) if dotted else None

    for n in cls.body:
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
            found.setdefault(n.target.id, set()).add(annotated(n.annotation))
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_property(n) and not any(
                (_dotted(d) or "").endswith((".setter", ".deleter")) for d in n.decorator_list):
            found.setdefault(n.name, set()).add(annotated(n.returns))  # @property def x(self) -> Foo
    for method in cls.body:
        if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) or not method.args.args:
            continue
        if any(_dotted(d) == "staticmethod" for d in method.decorator_list):
            continue
        me = method.args.args[0].arg
        params = {p.arg: p.annotation for p in [*method.args.args[1:], *method.args.kwonlyargs]}
        index = indexes.get(id(method)) or index_body(method)  # properties are no targets but bind attributes
        plain: Counter[str] = Counter()
        for n in index.attr_assigns:
            if isinstance(n, ast.AnnAssign):
                t = n.target
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == me:
                    plain[t.attr] += 1
                    found.setdefault(t.attr, set()).add(annotated(n.annotation))
            else:
                value = _unwrap(n.value)
                for t in n.targets:
                    if not (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == me):
                        continue
                    plain[t.attr] += 1
                    if isinstance(value, ast.Call):
                        dotted = _dotted(value.func)
                        q = _qualify(mod, dotted, module_defs) if dotted else None
                        found.setdefault(t.attr, set()).add(_type_of_call(q) if q else None)
                    elif isinstance(value, ast.Name) and value.id in params:
                        found.setdefault(t.attr, set()).add(annotated(params[value.id]))
                    elif not (isinstance(value, ast.Constant) and value.value is None):
                        found.setdefault(t.attr, set()).add(None)  # a value of unknown type
        for attr, n in index.attr_binds.items():
            if n > plain[attr]:  # self.x += ..., self.a, self.b = ..., for self.x in ...: of unknown type
                found.setdefault(attr, set()).add(None)
    return {attr: next(iter(qs)) for attr, qs in found.items() if len(qs) == 1 and None not in qs}  # type: ignore[misc]


_OVERLOADS = frozenset({"overload", "typing.overload", "t.overload", "typing_extensions.overload"})
_PROPERTIES = frozenset({"property", "cached_property", "functools.cached_property", "abc.abstractproperty"})


def _is_stub(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """An ``@overload`` signature: the implementation is the undecorated def that follows."""
    return any(_dotted(d) in _OVERLOADS for d in node.decorator_list)


def _is_property(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A property's getter/setter/deleter: ``obj.x(...)`` calls the value, never this def."""
    for d in node.decorator_list:
        dotted = _dotted(d) or ""
        if dotted in _PROPERTIES or dotted.endswith((".setter", ".getter", ".deleter")):
            return True
    return False


def _functions_and_classes(mod: ModuleFacts, tree: ast.Module) -> list[tuple[ast.AST, str, str | None]]:
    """Module-level functions and methods of module-level classes: (node, qualname, class name)."""
    found: list[tuple[ast.AST, str, str | None]] = []
    for node in _top_level_statements(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if not _is_stub(node):
                found.append((node, node.name, None))
        elif isinstance(node, ast.ClassDef):
            mod.classes.add(node.name)
            found.append((node, node.name, None))
            for child in _top_level_statements(node.body):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _is_stub(child) and not _is_property(child):
                    found.append((child, f"{node.name}.{child.name}", node.name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            _bind_import(node, mod.module, mod.is_package, mod.imports)
            if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
                base = _import_base(mod.module, mod.is_package, node.level) if node.level else ""
                source = ".".join(p for p in (base, node.module or "") if p)
                if source:
                    mod.star_imports.append(source)
    return found


def _bound_names(statements: Iterable[ast.stmt]) -> Counter[str]:
    """How many times each name is bound by these statements (assignments, defs, imports, loops)."""
    counts: Counter[str] = Counter()
    for node in statements:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            counts[node.name] += 1
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            counts.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor, ast.With, ast.AsyncWith)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if hasattr(node, "target") else \
                [i.optional_vars for i in node.items if i.optional_vars is not None]  # type: ignore[attr-defined]
            for t in targets:
                counts.update(_store_names(t))
    return counts


def _module_bindings(mod: ModuleFacts, tree: ast.Module, module_defs: set[str], indexes: dict[int, BodyIndex]) -> None:
    """Names bound once at module level (and never rebound through ``global``): ``Eq = Equality`` /
    ``fn = pkg.mod.func`` resolve like imports (``mod.imports``); ``log = Logger(...)`` / ``log: Logger``
    give the name a type (``mod.global_types``); ``CONFIG = load_config(...)`` holds that call's value
    (``mod.global_values``). ``plus = add`` (a method of the same class) and ``f = staticmethod(func)``
    bound once in a class body resolve to that method / function."""
    statements = list(_top_level_statements(tree.body))
    candidates = [(t.id, n) for n in statements if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None
                  for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)]
    if candidates:
        counts = _bound_names(statements)
        rebound = {name for index in indexes.values() for name in index.global_names}
        for name, n in candidates:  # A = B = C binds both A and B
            if counts[name] != 1 or name in rebound:
                continue
            value = _unwrap(n.value)  # type: ignore[arg-type]
            if isinstance(n, ast.AnnAssign):
                dotted = _annotated_class(n.annotation)
                q = _qualify(mod, dotted, module_defs) if dotted else None
                if q:
                    mod.global_types[name] = q
            if isinstance(value, (ast.Name, ast.Attribute)):
                dotted = _dotted(value)
                q = _qualify(mod, dotted, module_defs) if dotted and dotted.split(".")[0] != name else None
                if q:
                    mod.imports[name] = q
            elif isinstance(value, ast.Call):
                dotted = _dotted(value.func)
                q = _qualify(mod, dotted, module_defs) if dotted else None
                if q:
                    mod.global_values[name] = q
                    mod.global_types.setdefault(name, _type_of_call(q))
    for cls in statements:
        if not isinstance(cls, ast.ClassDef):
            continue
        body = list(_top_level_statements(cls.body))
        methods = {n.name for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        counts = None
        for n in body:
            if not (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)):
                continue
            value, target = n.value, None
            if isinstance(value, ast.Name) and value.id in methods:
                target = f"{mod.module}.{cls.name}.{value.id}"
            elif (isinstance(value, ast.Call) and _dotted(value.func) == "staticmethod" and len(value.args) == 1
                  and not value.keywords and isinstance(value.args[0], (ast.Name, ast.Attribute))):
                dotted = _dotted(value.args[0])  # __call__ = staticmethod(sympify): the function itself, nothing bound
                target = _qualify(mod, dotted, module_defs) if dotted and dotted not in methods else None
            if target is not None:
                counts = counts or _bound_names(body)
                name = n.targets[0].id
                if counts[name] == 1 and f"{cls.name}.{name}" not in mod.functions:
                    mod.imports[f"{cls.name}.{name}"] = target


def facts_from_tree(tree: ast.Module, mod: ModuleFacts, guess_same_module: bool = False) -> ModuleFacts:
    defs = _functions_and_classes(mod, tree)
    if mod.origin == "stdlib" and mod.module in _PLATFORM_IMPORTS:  # os: ``import posixpath as path`` or ntpath, by platform
        mod.imports.update(_PLATFORM_IMPORTS[mod.module])
    indexes = {id(node): index_body(node) for node, _, _ in defs if not isinstance(node, ast.ClassDef)}  # one walk per def
    for node, qualname, class_name in defs:
        if isinstance(node, ast.ClassDef):
            facts = _constructor_facts(node, indexes)
        else:
            facts = function_facts(node, qualname, class_name is not None, indexes[id(node)])  # type: ignore[arg-type]
        earlier = mod.functions.get(qualname)
        if earlier is not None and (isinstance(node, ast.ClassDef) or replace(earlier, lineno=0) != replace(facts, lineno=0)):
            mod.duplicated.add(qualname)  # two different defs (conditional): which one runs is unknown
        mod.functions[qualname] = facts  # the same def in both branches of an if/try is that def
    module_defs = {q for q in mod.functions if "." not in q} | mod.classes
    _module_bindings(mod, tree, module_defs, indexes)
    attr_types: dict[str, dict[str, str]] = {}
    class_flows: dict[str, _ClassFlows] = {}
    for node, qualname, class_name in defs:
        if isinstance(node, ast.ClassDef):
            bases = (_dotted(b.value if isinstance(b, ast.Subscript) else b) for b in node.bases)  # Base[T] is Base
            mod.bases[qualname] = [q for q in (_qualify(mod, b, module_defs) for b in bases if b) if q]
            attr_types[qualname] = mod.attr_types[qualname] = _class_attr_types(node, mod, module_defs, indexes)
            class_flows[qualname] = _ClassFlows(_attr_bindings(node, indexes))
            mod.attr_bound[qualname] = frozenset(a for a, n in class_flows[qualname].attr_bindings.items() if n)
    for node, qualname, class_name in defs:
        if isinstance(node, ast.ClassDef):
            continue
        types = attr_types.get(class_name or "", {})
        scanner = _BodyScanner(mod, node, qualname, class_name, module_defs, guess_same_module, types,  # type: ignore[arg-type]
                               class_flows=class_flows.get(class_name or ""), index=indexes[id(node)])
        scanner.scan(node.body)  # type: ignore[attr-defined]
    for flows in class_flows.values():
        mod.flows.extend(flows.flows())
    body = [s for s in tree.body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    if body:  # statements at module level (scripts, ``if __name__ == "__main__":``, module setup) are a body too
        node = ast.FunctionDef(name=MODULE_BODY, args=ast.arguments([], [], None, [], [], None, []), body=body, decorator_list=[])
        _BodyScanner(mod, node, MODULE_BODY, None, module_defs, guess_same_module).scan(body)
    return mod


def parse_file(item: FileItem) -> ModuleFacts | FileRejection:
    """One source file's facts, or why it could not be read (never raises on bad files)."""
    rid = f"file:{item.origin}:{item.path}"
    try:
        size = os.path.getsize(item.path)
        if size > MAX_FILE_BYTES:
            return FileRejection(rid, MineReason.FILE_TOO_LARGE, f"{size} bytes > {MAX_FILE_BYTES}")
        data = Path(item.path).read_bytes()
    except OSError as exc:
        return FileRejection(rid, MineReason.UNREADABLE_FILE, f"{type(exc).__name__}: {exc}")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        source = data.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError) as exc:
        return FileRejection(rid, MineReason.BAD_ENCODING, f"{type(exc).__name__}: {exc}")
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return FileRejection(rid, MineReason.SYNTAX_ERROR, f"{type(exc).__name__}: {exc}"[:300])
    try:
        return facts_from_tree(tree, ModuleFacts(item.module, item.origin, item.path, item.is_package, rid, flows_only=item.flows_only))
    except RecursionError as exc:  # pathologically nested generated code
        return FileRejection(rid, MineReason.SYNTAX_ERROR, f"RecursionError while scanning: {exc}"[:300])


def _parse_chunk(items: Sequence[FileItem]) -> list[ModuleFacts | FileRejection]:
    with _no_gc():
        return [parse_file(i) for i in items]


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """The cyclic garbage collector paused: parsing and resolving allocate millions of objects that form
    no reference cycles (ASTs have no parent links), and its passes over them cost a fifth of the time."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# -- file discovery -------------------------------------------------------------------------------
def module_name(rel: Path) -> tuple[str, bool]:
    parts = list(rel.with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts = parts[:-1]
    return ".".join(parts), is_package


def tree_files(root: Path, origin: str, skip_dirs: frozenset[str] = SKIP_DIRS, tests: bool = True) -> list[FileItem]:
    """``*.py`` files under ``root`` as importable modules. Files under a ``test``/``tests``/``testing``
    folder are read for their flows only (``FileItem.flows_only``), or not at all when ``tests`` is False."""
    out: list[FileItem] = []
    root = Path(root)
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in skip_dirs and d.isidentifier() and (tests or d not in TEST_DIRS))
        rel = Path(folder).relative_to(root)
        in_tests = any(part in TEST_DIRS for part in rel.parts)
        for name in sorted(names):
            if name.endswith(".py") and name[:-3].isidentifier():
                path = Path(folder, name)
                mod, is_package = module_name(path.relative_to(root))
                if mod:
                    out.append(FileItem(str(path), mod, is_package, origin, in_tests))
    return out


def default_roots(kind: str) -> list[Path]:
    if kind == "stdlib":
        return [Path(sysconfig.get_paths()["stdlib"])]
    if kind == "site-packages":
        paths = sysconfig.get_paths()
        return sorted({Path(paths["purelib"]), Path(paths["platlib"])})
    raise ValueError(f"no default root for source {kind!r}")


# -- resolve phase (parent) -----------------------------------------------------------------------
@dataclass(frozen=True)
class Target:
    key: str  # module.qualname
    module: str
    facts: FunctionFacts
    via_instance: bool = False  # a method reached through a module-level instance: its self is bound


@dataclass(frozen=True)
class MinedFlow:
    """An accepted candidate: ``consumer`` depends on ``producer`` through parameter ``param``."""

    record_id: str
    consumer: str
    producer: str
    param: str
    via: str


@dataclass(frozen=True)
class CandidateRejection:
    record_id: str
    stage: str  # parse | resolve
    reason: str
    detail: str


class SymbolTable:
    """Qualified names -> functions over every module read, following re-exports."""

    def __init__(self, modules: Sequence[ModuleFacts], ambiguous_modules: set[str]):
        self.modules = {m.module: m for m in modules}
        self.ambiguous_modules = ambiguous_modules
        self._cache: dict[str, tuple[Target | None, str, str]] = {}
        self._arity: dict[str, int | None] = {}

    def _module_prefix(self, parts: list[str]) -> int:
        for n in range(len(parts), 0, -1):
            name = ".".join(parts[:n])
            if name in self.modules or name in self.ambiguous_modules:
                return n
        return 0

    def return_class(self, callee: str, depth: int) -> str | None:
        """Qualified class of what a call of ``callee`` gives: the one class its return annotation names
        (``Foo``, ``"Foo"``, ``Optional[Foo]``, ``Foo | None``; ``Self``: the class the method was looked
        up on), else the one type every ``return`` of its body gives (``return self`` / ``return cls(...)``:
        that class; ``return D(...)``: the type of a call of ``D``), else None."""
        if depth > MAX_REEXPORT_HOPS:
            return None
        target, _, _ = self.resolve(callee, depth + 1)
        if target is None:
            return None
        facts = target.facts
        named = annotation_class(facts.return_annotation)
        if named is not None:
            found = self._class_in(target, callee, named)
            if found is not None:
                return found
        inferred = facts.inferred_return
        if inferred is None:
            return None
        if inferred == "Self":
            return self._class_in(target, callee, inferred)
        called = self._class_in(target, callee, inferred)
        return self.return_class(called, depth + 1) if called is not None else None

    def attr_type(self, owner: str, attr: str, depth: int) -> str | None:
        """Type string of ``attr`` on instances of ``owner`` (a type string): from the class that binds
        it, searching the class then its bases (first base first); None when the binding class gives
        it no single type, or nobody binds it."""
        if depth > MAX_REEXPORT_HOPS:
            return None
        if owner.endswith("()"):
            owner = self.return_class(owner[:-2], depth) or ""
        target = self.resolve(owner, depth + 1)[0] if owner else None
        if target is None or target.module not in self.modules:
            return None
        mod, cls = self.modules[target.module], target.key[len(target.module) + 1:]
        if cls not in mod.classes:
            return None
        if attr in mod.attr_bound.get(cls, ()) or attr in mod.attr_types.get(cls, {}):
            return mod.attr_types.get(cls, {}).get(attr)
        for base in mod.bases.get(cls, []):
            found = self.attr_type(base, attr, depth + 1)
            if found is not None:
                return found
        return None

    def documented_arity(self, target: Target) -> int | None:
        """n when the docstring's Returns section names n items (``x : ndarray`` / ``y : ndarray``),
        each a plain distinct identifier, n >= 2 (docstrings parsed only here, once per function)."""
        if target.key not in self._arity:
            import docstring_parser

            try:
                names = [r.return_name for r in docstring_parser.parse(target.facts.docstring).many_returns]
            except Exception:
                names = []
            ok = len(names) >= 2 and all(n and n.isidentifier() for n in names) and len(set(names)) == len(names)
            self._arity[target.key] = len(names) if ok else None
        return self._arity[target.key]

    def _class_in(self, target: Target, callee: str, dotted: str) -> str | None:
        """``dotted`` as written in ``target``'s module, qualified; ``Self`` is the class of ``callee``."""
        if dotted.rsplit(".", 1)[-1] == "Self":
            if target.facts.binding not in ("instance", "class"):
                return None
            owner = callee.rsplit(".", 1)[0]
            return owner.removesuffix(".<super>")
        mod = self.modules[target.module]
        head, _, tail = dotted.partition(".")
        if head in mod.imports:
            base = mod.imports[head]
        elif head in mod.classes or head in mod.functions:
            base = f"{mod.module}.{head}"
        else:
            return None
        return f"{base}.{tail}" if tail else base

    def resolve(self, name: str, depth: int = 0) -> tuple[Target | None, str, str]:
        """(target, reason, detail); reason is "" when resolved. Follows re-exports (package
        ``__init__`` import tables, star imports) and inherited methods (class bases), a few hops deep.
        Memoized by name: star imports and bases branch, and cycles must end."""
        cached = self._cache.get(name)
        if cached is not None:
            return cached
        self._cache[name] = (None, MineReason.UNRESOLVED_TARGET, f"cycle at {name}")  # while in progress
        found = self._resolve(name, depth)
        self._cache[name] = found
        return found

    def _resolve(self, name: str, depth: int) -> tuple[Target | None, str, str]:
        if depth > MAX_REEXPORT_HOPS:
            return None, MineReason.UNRESOLVED_TARGET, f"more than {MAX_REEXPORT_HOPS} re-export/base hops at {name}"
        if ".<super>." in name:  # super().m inside Class: m of the bases, first base first
            owner, _, attr = name.partition(".<super>.")
            module, _, cls = owner.rpartition(".")
            for base in self.modules[module].bases.get(cls, []) if module in self.modules else []:
                found = self.resolve(f"{base}.{attr}", depth + 1)
                if found[0] is not None or found[1] == MineReason.AMBIGUOUS_TARGET:
                    return found
            return None, MineReason.UNRESOLVED_TARGET, f"super().{attr} not found in the bases of {owner}"
        if ".<attr>." in name:  # T.<attr>.a.m: m of the type of attribute a of a T instance (or of its bases)
            owner, _, rest_name = name.partition(".<attr>.")
            attr, _, member = rest_name.partition(".")
            typed = self.attr_type(owner, attr, depth + 1)
            if typed is None:
                return None, MineReason.UNRESOLVED_TARGET, f"{name}: type of attribute {attr} unknown"
            return self.resolve(f"{typed}.{member}", depth + 1)
        if "()." in name:  # f().m: a method of what f returns, by f's return annotation
            callee, _, attr = name.rpartition("().")
            cls = self.return_class(callee, depth)
            if cls is None:
                return None, MineReason.UNRESOLVED_TARGET, f"{name}: return type of {callee} unknown"
            return self.resolve(f"{cls}.{attr}", depth + 1)
        parts = name.split(".")
        n = self._module_prefix(parts)
        if n == 0:
            return None, MineReason.UNRESOLVED_TARGET, f"no module read for {name}"
        module = ".".join(parts[:n])
        if module in self.ambiguous_modules:
            return None, MineReason.AMBIGUOUS_TARGET, f"module {module} read from more than one file"
        rest = parts[n:]
        mod = self.modules[module]
        if not rest:
            return None, MineReason.UNRESOLVED_TARGET, f"{name} is a module"
        qual = ".".join(rest)
        if qual in mod.functions:
            if qual in mod.duplicated:
                return None, MineReason.AMBIGUOUS_TARGET, f"{name} is defined more than once"
            facts = mod.functions[qual]
            if not facts.params_known:  # a class call with an inherited __init__: the first base's signature
                for base in mod.bases.get(qual, []):
                    found = self.resolve(base, depth + 1)[0]
                    if found is not None and found.facts.params_known:
                        facts = replace(facts, params=found.facts.params, params_known=True)
                        break
            return Target(f"{module}.{qual}", module, facts), "", ""
        if len(rest) == 2 and qual in mod.imports:  # ``plus = add`` in the class body
            return self.resolve(mod.imports[qual], depth + 1)
        if len(rest) <= 2 and rest[0] in mod.global_types and rest[0] not in mod.imports:
            # ``S = SingletonRegistry()`` at module level: ``S(x)`` calls its __call__, ``S.m(x)`` its method m
            member = rest[1] if len(rest) == 2 else "__call__"
            found = self.resolve(f"{mod.global_types[rest[0]]}.{member}", depth + 1)
            return (replace(found[0], via_instance=True), "", "") if found[0] is not None else found
        if rest[0] in mod.classes:
            if len(rest) == 2:
                for base in mod.bases.get(rest[0], []):  # an inherited method, first base first
                    found = self.resolve(f"{base}.{rest[1]}", depth + 1)
                    if found[0] is not None or found[1] == MineReason.AMBIGUOUS_TARGET:
                        return found
            return None, MineReason.UNRESOLVED_TARGET, f"{name}: not defined in the class or its bases"
        if rest[0] in mod.imports:  # a re-export: follow the import
            target = ".".join([mod.imports[rest[0]], *rest[1:]])
            if target == name:
                return None, MineReason.UNRESOLVED_TARGET, f"import cycle at {name}"
            return self.resolve(target, depth + 1)
        for source in mod.star_imports[:MAX_STAR_SOURCES] if depth < MAX_STAR_DEPTH else ():  # ``from .core import *`` re-exports
            found = self.resolve(".".join([source, *rest]), depth + 1)
            if found[0] is not None or found[1] == MineReason.AMBIGUOUS_TARGET:
                return found
        return None, MineReason.UNRESOLVED_TARGET, f"{qual} not defined in module {module}"


def _consumer_param(consumer: FunctionFacts, slot: str, bound: bool) -> str | None:
    """The parameter name a call argument binds to; None when the signature has no such slot."""
    if not slot.isdigit():
        return slot if consumer.accepts_keyword(slot) else None
    index = int(slot)
    if consumer.binding == "instance" and not bound:
        index -= 1  # Class.method(obj, x): the first argument is the instance
        if index < 0:
            return None
    return consumer.param_for_position(index)


def _documented_param(consumer: FunctionFacts, param: str) -> bool:
    """*args/**kwargs count only when the docstring names them (as the doc does)."""
    kind = next((p.kind for p in consumer.params if p.name == param), "var_keyword")
    if not kind.startswith("var_"):
        return True
    return param in _docstring_param_names(consumer.docstring)


@functools.lru_cache(maxsize=65536)
def _docstring_param_names(docstring: str) -> frozenset[str]:
    import docstring_parser  # rare path: parse only here, once per docstring

    try:
        return frozenset(p.arg_name.lstrip("*") for p in docstring_parser.parse(docstring).params if p.arg_name)
    except Exception:
        return frozenset()


class MineResult:
    """What mining found. A plain class, not a dataclass, on purpose: Prefect walks dataclass task
    arguments field by field (to find futures), which over ~10^6 candidates costs minutes per task."""

    def __init__(self, flows: list[MinedFlow], rejections: list[CandidateRejection], file_rejections: list[FileRejection],
                 targets: dict[str, Target], documented: dict[str, Target], files_read: int, files_parsed: int,
                 candidates: int, parsed_ids: list[str] | None = None, output_names: dict[str, str] | None = None):
        self.flows = flows
        self.rejections = rejections
        self.file_rejections = file_rejections
        self.targets = targets  # every function a flow touches
        self.documented = documented  # every documented function read (for hard negatives)
        self.files_read = files_read
        self.files_parsed = files_parsed
        self.candidates = candidates
        self.parsed_ids = parsed_ids if parsed_ids is not None else []
        self.output_names = output_names if output_names is not None else {}  # target key -> what callers name its result

    def __repr__(self) -> str:
        return (f"MineResult(files_read={self.files_read}, candidates={self.candidates}, flows={len(self.flows)}, "
                f"rejections={len(self.rejections)})")

    def reason_counts(self) -> dict[str, int]:
        return dict(sorted(Counter(r.reason for r in self.rejections).items()))

    def file_reason_counts(self) -> dict[str, int]:
        return dict(sorted(Counter(r.reason for r in self.file_rejections).items()))


def _judge(raw: RawFlow, table: SymbolTable) -> tuple[MinedFlow | None, CandidateRejection | None, Target | None, Target | None]:
    def reject(reason: str, detail: str, stage: str = "resolve") -> tuple[None, CandidateRejection, None, None]:
        return None, CandidateRejection(raw.record_id, stage, reason, detail), None, None

    if raw.reason:
        return reject(raw.reason, raw.detail, "parse")
    consumer, why_c, detail_c = table.resolve(raw.consumer)  # type: ignore[arg-type]
    if consumer is None:
        return reject(why_c, f"consumer: {detail_c}")
    producer, why_p, detail_p = table.resolve(raw.producer)  # type: ignore[arg-type]
    if producer is None:
        return reject(why_p, f"producer: {detail_p}")
    if consumer.key == producer.key:
        return reject(MineReason.SELF_FLOW, consumer.key)
    if not consumer.facts.documented:
        return reject(MineReason.UNDOCUMENTED_CONSUMER, consumer.key)
    if not producer.facts.documented:
        return reject(MineReason.UNDOCUMENTED_PRODUCER, producer.key)
    if not producer.facts.returns_value:
        return reject(MineReason.PRODUCER_RETURNS_NOTHING, producer.key)
    if raw.unpack == -1 and not producer.facts.returns_items:  # for a in f(x): f must give like items
        return reject(MineReason.LOOP_ITEM, f"{producer.key} is not known to give items to iterate (no generator, list or Iterator)")
    if raw.unpack > 0 and producer.facts.tuple_arity != raw.unpack and table.documented_arity(producer) != raw.unpack:
        arity = producer.facts.tuple_arity or table.documented_arity(producer)  # a, b = f(x): f must give that many items
        return reject(MineReason.TUPLE_UNPACK, f"{raw.detail} unpacked from {producer.key}, which "
                      + (f"returns {arity}-item tuples" if arity else "is not known to return a tuple"))
    param = _consumer_param(consumer.facts, raw.slot, raw.bound or consumer.via_instance)
    if param is None:
        return reject(MineReason.BAD_ARGUMENT_POSITION, f"argument {raw.slot} of {consumer.key}{'' if raw.slot.isdigit() else ' (unknown keyword)'}")
    if not _documented_param(consumer.facts, param):
        return reject(MineReason.UNDOCUMENTED_PARAMETER, f"{consumer.key}(*{param})")
    return MinedFlow(raw.record_id, consumer.key, producer.key, param, raw.via), None, consumer, producer


def _merge(modules: Iterable[ModuleFacts | FileRejection], file_rejections: list[FileRejection],
           parsed_ids: list[str]) -> tuple[list[ModuleFacts], set[str]]:
    """Modules by name; a name read from two files is ambiguous (its flows still count as candidates),
    except function records of one file (CodeSearchNet), which are merged."""
    by_name: dict[str, ModuleFacts] = {}
    flows_only: list[ModuleFacts] = []
    ambiguous: set[str] = set()
    for m in modules:
        if isinstance(m, FileRejection):
            file_rejections.append(m)
            continue
        parsed_ids.append(m.source_id)
        if m.flows_only:
            flows_only.append(m)
            continue
        prev = by_name.get(m.module)
        if prev is None:
            by_name[m.module] = m
        elif m.origin == "codesearchnet" and prev.origin == "codesearchnet":
            for q, f in m.functions.items():
                if q in prev.functions:
                    prev.duplicated.add(q)
                prev.functions[q] = f
            prev.classes |= m.classes
            prev.flows += m.flows
        else:
            ambiguous.add(m.module)
            prev.flows += m.flows  # keep every candidate in the books
    return list(by_name.values()) + flows_only, ambiguous


# A parameter that receives values from more than this many distinct producers takes anything
# (``assert_equal(actual)``, ``dumps(obj)``, ``latex(expr)``, ``deepcopy(x)``): a flow into it says
# nothing about what the consumer needs, and such sinks, test assertions above all, taught the model
# noise (pretraining stayed at chance). API dependencies have few producers per input.
DEFAULT_MAX_PRODUCERS_PER_PARAM = 8


def resolve_flows(parsed: Iterable[ModuleFacts | FileRejection], files_read: int,
                  max_producers_per_param: int | None = DEFAULT_MAX_PRODUCERS_PER_PARAM) -> MineResult:
    with _no_gc():
        return _resolve_flows(parsed, files_read, max_producers_per_param)


def reject_generic_sinks(flows: list[MinedFlow], max_producers: int | None) -> tuple[list[MinedFlow], list[CandidateRejection]]:
    """Flows into a (consumer, parameter) that more than ``max_producers`` distinct producers reach
    become ``generic_sink`` rejections; None keeps every flow."""
    if max_producers is None:
        return flows, []
    producers: dict[tuple[str, str], set[str]] = {}
    for f in flows:
        producers.setdefault((f.consumer, f.param), set()).add(f.producer)
    kept, rejected = [], []
    for f in flows:
        n = len(producers[(f.consumer, f.param)])
        if n > max_producers:
            rejected.append(CandidateRejection(f.record_id, "resolve", MineReason.GENERIC_SINK,
                                               f"{f.consumer}({f.param}) takes values from {n} producers (> {max_producers})"))
        else:
            kept.append(f)
    return kept, rejected


def _resolve_flows(parsed: Iterable[ModuleFacts | FileRejection], files_read: int,
                   max_producers_per_param: int | None = DEFAULT_MAX_PRODUCERS_PER_PARAM) -> MineResult:
    file_rejections: list[FileRejection] = []
    parsed_ids: list[str] = []
    modules, ambiguous = _merge(parsed, file_rejections, parsed_ids)
    table = SymbolTable([m for m in modules if m.module not in ambiguous and not m.flows_only], ambiguous)
    flows: list[MinedFlow] = []
    rejections: list[CandidateRejection] = []
    targets: dict[str, Target] = {}
    accepted_pairs: dict[tuple[str, str], str] = {}
    candidates = 0
    for mod in modules:
        for raw in mod.flows:
            candidates += 1
            flow, rejection, consumer, producer = _judge(raw, table)
            if flow is not None:
                first = accepted_pairs.get((flow.consumer, flow.producer))
                if first is not None:
                    rejection, flow = CandidateRejection(raw.record_id, "resolve", MineReason.DUPLICATE_FLOW, f"same pair as {first}"), None
                else:
                    accepted_pairs[(flow.consumer, flow.producer)] = flow.record_id
                    flows.append(flow)
                    targets[consumer.key] = consumer  # type: ignore[union-attr]
                    targets[producer.key] = producer  # type: ignore[union-attr]
            if rejection is not None:
                rejections.append(rejection)
    flows, sinks = reject_generic_sinks(flows, max_producers_per_param)
    rejections += sinks
    used = {k for f in flows for k in (f.consumer, f.producer)}
    targets = {k: t for k, t in targets.items() if k in used}
    assert len(flows) + len(rejections) == candidates, "every candidate ends accepted or rejected"
    documented = {
        f"{m.module}.{q}": Target(f"{m.module}.{q}", m.module, f)
        for m in modules if m.module not in ambiguous and not m.flows_only
        for q, f in m.functions.items() if f.documented and q not in m.duplicated
    }
    assert len(parsed_ids) + len(file_rejections) == files_read, "every file ends parsed or rejected"
    return MineResult(flows, rejections, file_rejections, targets, documented, files_read,
                      len(parsed_ids), candidates, parsed_ids, caller_output_names(modules, table, set(targets)))


# Variable names that say nothing about what a value is.
_UNINFORMATIVE_NAMES = frozenset({"res", "ret", "rv", "out", "val", "tmp", "temp", "obj", "item", "it", "resp", "retval",
                                  "rval", "new", "old", "cur", "ans"})


def caller_output_names(modules: Sequence[ModuleFacts], table: SymbolTable, keys: set[str]) -> dict[str, str]:
    """For each target in ``keys``: the variable name its callers most often give its result
    (``token = get_token(...)`` names the output ``token``). Real code names values after what they
    are, the way tool docs name outputs; one- and two-letter and generic names do not count."""
    from schemas.name_rule import GENERIC_OUTPUT_NAMES

    resolved: dict[str, str | None] = {}
    counts: dict[str, Counter[str]] = {}
    for mod in modules:
        for callee, var in mod.assigned:
            if len(var) < 3 or var.startswith("_") or var.lower() in _UNINFORMATIVE_NAMES or var.lower() in GENERIC_OUTPUT_NAMES:
                continue
            if callee not in resolved:
                target = table.resolve(callee)[0]
                resolved[callee] = target.key if target is not None else None
            key = resolved[callee]
            if key in keys:
                counts.setdefault(key, Counter())[var] += 1
    return {key: max(c.items(), key=lambda kv: (kv[1], kv[0]))[0] for key, c in counts.items()}


def map_chunks(fn: Any, items: Sequence[Any], workers: int, chunk: int) -> list[Any]:
    """``fn`` over ``items`` in chunks, in ``workers`` processes (in-process when workers <= 1 or
    there is one chunk); results flattened in input order."""
    chunks = [items[i: i + chunk] for i in range(0, len(items), chunk)]
    out: list[Any] = []
    if workers <= 1 or len(chunks) <= 1:
        for c in chunks:
            out += fn(c)
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            for part in pool.map(fn, chunks):
                out += part
    return out


def mine_files(items: Sequence[FileItem], workers: int = 2, chunk_files: int = 64,
               max_producers_per_param: int | None = DEFAULT_MAX_PRODUCERS_PER_PARAM) -> MineResult:
    """Parse ``items`` in ``workers`` processes (in-process when workers <= 1), then resolve."""
    return resolve_flows(map_chunks(_parse_chunk, items, workers, chunk_files), len(items), max_producers_per_param)


# -- CodeSearchNet-style records --------------------------------------------------------------------
def _record_module(repo: str, path: str) -> str:
    stem = path[:-3] if path.endswith(".py") else path
    return repo.replace(".", "_").replace("/", "__") + ":" + stem.replace(".", "_").replace("/", ".")


def parse_record(repo: str, path: str, func_name: str, code: str) -> ModuleFacts | FileRejection:
    """One function record (its ``code`` is the function alone) as a one-function module; names it
    calls are taken to be other functions of the same file, resolved against the record set."""
    import textwrap

    module = _record_module(repo, path)
    rid = f"record:{repo}:{path}:{func_name}"
    try:
        tree = ast.parse(textwrap.dedent(code))
    except (SyntaxError, ValueError, RecursionError) as exc:
        return FileRejection(rid, MineReason.SYNTAX_ERROR, f"{type(exc).__name__}: {exc}"[:300])
    node = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if node is None:
        return FileRejection(rid, MineReason.SYNTAX_ERROR, "code holds no function definition")
    mod = ModuleFacts(module, "codesearchnet", f"{repo}:{path}", False, rid)
    class_name = func_name.rsplit(".", 1)[0] if "." in func_name else None
    qualname = func_name if class_name else node.name
    if class_name:
        mod.classes.add(class_name)
    mod.functions[qualname] = function_facts(node, qualname, in_class=class_name is not None)
    scanner = _BodyScanner(mod, node, qualname, class_name, set(), guess_same_module=True)
    scanner.scan(node.body)
    return mod


# -- docs for the functions a dataset needs -------------------------------------------------------
def _docs_chunk(facts: Sequence[tuple[FunctionFacts, str | None]]) -> list[dict[str, Any] | None]:
    with _no_gc():
        return [doc_from_facts(f, output_hint=hint) for f, hint in facts]


def build_docs(targets: Sequence[Target], workers: int = 2, chunk: int = 512,
               output_names: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """API doc per target key, built in ``workers`` processes (docstring parsing is the cost).
    ``output_names``: the callers' name for a target's result (``MineResult.output_names``)."""
    facts = [(t.facts, (output_names or {}).get(t.key)) for t in targets]
    docs = map_chunks(_docs_chunk, facts, workers, chunk)
    return {t.key: d for t, d in zip(targets, docs) if d is not None}


def top_package(key: str) -> str:
    return key.split(".", 1)[0].split(":", 1)[0]


if __name__ == "__main__":  # quick look: python -m tasks.mining.core DIR
    res = mine_files(tree_files(Path(sys.argv[1]), "tree"))
    print(len(res.flows), res.candidates, res.reason_counts())
