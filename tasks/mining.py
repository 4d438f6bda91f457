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

from tasks.docstrings import FunctionFacts, ParamFacts, doc_from_facts, function_facts

SKIP_DIRS = frozenset({"test", "tests", "testing", "__pycache__", "idlelib", "lib2to3", "site-packages", ".git", "node_modules"})
MAX_FILE_BYTES = 1_000_000
MAX_REEXPORT_HOPS = 4
MAX_STAR_SOURCES = 16  # star imports fan out: followed two hops deep, this many modules each
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
    UNRESOLVED_TARGET = "unresolved_target"  # a local, builtin, attribute of an object, missing module...
    AMBIGUOUS_TARGET = "ambiguous_target"  # defined twice (conditional defs) or module read twice
    UNDOCUMENTED_PRODUCER = "undocumented_producer"
    UNDOCUMENTED_CONSUMER = "undocumented_consumer"
    PRODUCER_RETURNS_NOTHING = "producer_returns_nothing"  # no ``return <value>``: nothing flows
    SELF_FLOW = "self_flow"  # g(g(x)): a function does not depend on itself
    BAD_ARGUMENT_POSITION = "bad_argument_position"  # positional index beyond the signature, unknown keyword
    UNDOCUMENTED_PARAMETER = "undocumented_parameter"  # reaches *args/**kwargs the doc does not list
    DUPLICATE_FLOW = "duplicate_flow"  # same (consumer, producer) as an accepted candidate


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
    assigned: list[tuple[str, str]] = field(default_factory=list)  # (callee, variable) of ``variable = callee(...)``


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
        if isinstance(n, ast.Lambda):
            continue
        if isinstance(n, ast.Call):
            found.append(n)
        stack.extend(ast.iter_child_nodes(n))
    return iter(sorted(found, key=lambda c: (c.lineno, c.col_offset)))


def _looks_like_class(qualified: str) -> bool:
    last = qualified.rsplit(".", 1)[-1]
    return last[:1].isupper() and not last.isupper()


def _type_of_call(callee: str) -> str:
    """Type string of a call's value: the class for ``Foo(...)``, else ``f()`` (what ``f`` returns,
    read from its return annotation when the names are resolved)."""
    return callee if _looks_like_class(callee) else f"{callee}()"


class _BodyScanner:
    """Straight-line reaching definitions of one function body, emitting candidate flows."""

    def __init__(self, mod: ModuleFacts, node: ast.FunctionDef | ast.AsyncFunctionDef, qualname: str,
                 class_name: str | None, module_defs: set[str], guess_same_module: bool,
                 attr_types: dict[str, str] | None = None, enclosing: _BodyScanner | None = None):
        self.mod, self.qualname, self.class_name = mod, qualname, class_name
        self.module_defs, self.guess = module_defs, guess_same_module
        self.attr_types = attr_types or {}  # self.<attr> -> type string of the class
        a = node.args
        positional = [*a.posonlyargs, *a.args]
        if enclosing is not None:  # a nested def sees its enclosing method's self
            self.self_name = enclosing.self_name
        else:
            self.self_name = positional[0].arg if class_name and positional else None
        params = {p.arg for p in [*positional, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x)]}
        assigned = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        self.locals = params | assigned | (enclosing.locals if enclosing is not None else set())
        self.local_imports: dict[str, str] = dict(enclosing.local_imports) if enclosing is not None else {}
        self.env: dict[str, tuple[str, ast.Call]] = {}  # name -> ("call" | "tuple", the producing call)
        # name -> qualified class: ``x = Foo(...)`` or ``x: Foo`` makes ``x.m()`` a call of ``Foo.m``
        self.types: dict[str, str] = {}
        for p in [*positional, *a.kwonlyargs]:
            dotted = _dotted(p.annotation) if p.annotation is not None else None
            resolved = self._resolve_global(dotted) if dotted else None
            if resolved and _looks_like_class(resolved):
                self.types[p.arg] = resolved

    # name resolution -------------------------------------------------------------------------
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
        if name in self.module_defs:
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
        if (isinstance(func, ast.Call) and isinstance(func.func, ast.Name) and func.func.id == "super"
                and self.class_name and len(chain) == 1):
            return f"{self.mod.module}.{self.class_name}.<super>.{chain[0]}", True, ""
        if not isinstance(func, ast.Name):
            return None, False, f"call on a {type(func).__name__} expression"
        chain.reverse()
        if chain and func.id == self.self_name and self.class_name:
            if len(chain) == 1:
                return f"{self.mod.module}.{self.class_name}.{chain[0]}", True, ""
            if len(chain) == 2 and chain[0] in self.attr_types:
                return f"{self.attr_types[chain[0]]}.{chain[1]}", True, ""
            return None, False, f"attribute of {func.id}: {func.id}.{'.'.join(chain)}"
        if len(chain) == 1 and func.id in self.types:
            return f"{self.types[func.id]}.{chain[0]}", True, ""
        base, why = self._resolve_name(func.id)
        if base is None:
            return None, False, why
        return ".".join([base, *chain]), False, ""

    # scanning --------------------------------------------------------------------------------
    def scan(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            self._stmt(stmt)

    def _kill(self, names: Iterable[str]) -> None:
        for n in names:
            self.env.pop(n, None)
            self.types.pop(n, None)

    def _expr(self, expr: ast.AST | None) -> None:
        if expr is None:
            return
        for call in _calls_in(expr):
            self._call(call)

    def _stmt(self, s: ast.stmt) -> None:
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
            self.scan(s.body)
            self.scan(s.orelse)
        elif isinstance(s, (ast.With, ast.AsyncWith)):
            for item in s.items:
                self._expr(item.context_expr)
                if item.optional_vars is not None:
                    self._kill(_store_names(item.optional_vars))
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
            value = _unwrap(s.value)
            for target in s.targets:
                self._bind(target, value)
        elif isinstance(s, ast.AnnAssign):
            self._expr(s.value)
            if s.value is not None:
                self._bind(s.target, _unwrap(s.value))
        elif isinstance(s, ast.AugAssign):
            self._expr(s.value)
            self._kill(_store_names(s.target))
        elif isinstance(s, ast.Delete):
            for t in s.targets:
                self._kill(_store_names(t))
        else:  # Expr, Return, Raise, Assert, ...: calls only
            for child in ast.iter_child_nodes(s):
                self._expr(child)

    def _bind(self, target: ast.AST, value: ast.expr) -> None:
        if isinstance(target, ast.Name):
            self.types.pop(target.id, None)
            if isinstance(value, ast.Call):
                self.env[target.id] = ("call", value)
                callee, _, _ = self.resolve(value.func)
                if callee:
                    self.types[target.id] = _type_of_call(callee)
                    self.mod.assigned.append((callee, target.id))  # what callers call the result
            else:
                self.env.pop(target.id, None)  # reassignment kills the flow
        elif isinstance(target, (ast.Tuple, ast.List)):
            for name in _store_names(target):
                self.types.pop(name, None)
                if isinstance(value, ast.Call):
                    self.env[name] = ("tuple", value)
                else:
                    self.env.pop(name, None)
        elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == self.self_name:
            key = f"{self.self_name}.{target.attr}"  # self.x = f(...); ...; g(self.x)
            if isinstance(value, ast.Call):
                self.env[key] = ("call", value)
            else:
                self.env.pop(key, None)
        # other attributes and subscripts hold no local flow

    def _call(self, call: ast.Call) -> None:
        slots: list[tuple[str, ast.expr]] = []
        for i, arg in enumerate(call.args):
            if isinstance(arg, ast.Starred):
                break  # positions after a *splat are unknown
            slots.append((str(i), arg))
        slots += [(kw.arg, kw.value) for kw in call.keywords if kw.arg is not None]
        consumer: tuple[str | None, bool, str] | None = None
        for slot, arg in slots:
            arg = _unwrap(arg)
            if isinstance(arg, ast.Call):
                producer_call, via, kind = arg, "direct", "call"
            elif isinstance(arg, ast.Name) and arg.id in self.env:
                kind, producer_call = self.env[arg.id]
                via = "variable"
            elif (isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name) and arg.value.id == self.self_name
                  and f"{self.self_name}.{arg.attr}" in self.env):
                kind, producer_call = self.env[f"{self.self_name}.{arg.attr}"]
                via = "attribute"
            else:
                continue
            if consumer is None:
                consumer = self.resolve(call.func)
            producer = self.resolve(producer_call.func)
            record_id = f"{self.mod.module}:{self.qualname}:{call.lineno}:{call.col_offset}:{slot}"
            reason, detail = None, ""
            if kind == "tuple":
                reason, detail = MineReason.TUPLE_UNPACK, "the argument is one element of an unpacked result"
            elif consumer[0] is None:
                reason, detail = MineReason.UNRESOLVED_TARGET, f"consumer: {consumer[2]}"
            elif producer[0] is None:
                reason, detail = MineReason.UNRESOLVED_TARGET, f"producer: {producer[2]}"
            self.mod.flows.append(RawFlow(record_id, consumer[0], producer[0], slot, via, consumer[1], reason, detail))


def _constructor_facts(cls: ast.ClassDef) -> FunctionFacts:
    """A class call as a tool: __init__'s parameters (or annotated fields of a dataclass-like body),
    the class docstring (else __init__'s), and one output, the instance."""
    init = next((n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "__init__"), None)
    doc = ast.get_docstring(cls, clean=True) or ""
    if init is not None:
        facts = function_facts(init, cls.name, in_class=True)
        params = facts.params
        doc = doc or facts.docstring
    else:
        params = tuple(
            ParamFacts(n.target.id, _annotation(n.annotation), "positional")
            for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.simple
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


def _class_attr_types(cls: ast.ClassDef, mod: ModuleFacts, module_defs: set[str]) -> dict[str, str]:
    """``attr: Foo`` in the class body and ``self.attr = Foo(...)`` / ``= f(...)`` in its methods,
    so ``self.attr.m()`` resolves; an attribute assigned two different types is left out."""
    found: dict[str, set[str]] = {}
    for n in cls.body:
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
            dotted = _dotted(n.annotation)
            q = _qualify(mod, dotted, module_defs) if dotted else None
            if q:
                found.setdefault(n.target.id, set()).add(q)
    for method in cls.body:
        if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) or not method.args.args:
            continue
        me = method.args.args[0].arg
        for n in ast.walk(method):
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call):
                for t in n.targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == me:
                        dotted = _dotted(n.value.func)
                        q = _qualify(mod, dotted, module_defs) if dotted else None
                        if q:
                            found.setdefault(t.attr, set()).add(_type_of_call(q))
    return {attr: next(iter(qs)) for attr, qs in found.items() if len(qs) == 1}


def _functions_and_classes(mod: ModuleFacts, tree: ast.Module) -> list[tuple[ast.AST, str, str | None]]:
    """Module-level functions and methods of module-level classes: (node, qualname, class name)."""
    found: list[tuple[ast.AST, str, str | None]] = []
    for node in _top_level_statements(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.append((node, node.name, None))
        elif isinstance(node, ast.ClassDef):
            mod.classes.add(node.name)
            found.append((node, node.name, None))
            for child in _top_level_statements(node.body):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found.append((child, f"{node.name}.{child.name}", node.name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            _bind_import(node, mod.module, mod.is_package, mod.imports)
            if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
                base = _import_base(mod.module, mod.is_package, node.level) if node.level else ""
                source = ".".join(p for p in (base, node.module or "") if p)
                if source:
                    mod.star_imports.append(source)
    return found


def facts_from_tree(tree: ast.Module, mod: ModuleFacts, guess_same_module: bool = False) -> ModuleFacts:
    defs = _functions_and_classes(mod, tree)
    for node, qualname, class_name in defs:
        if qualname in mod.functions:
            mod.duplicated.add(qualname)
        if isinstance(node, ast.ClassDef):
            mod.functions[qualname] = _constructor_facts(node)
        else:
            mod.functions[qualname] = function_facts(node, qualname, in_class=class_name is not None)  # type: ignore[arg-type]
    module_defs = {q for q in mod.functions if "." not in q} | mod.classes
    attr_types: dict[str, dict[str, str]] = {}
    for node, qualname, class_name in defs:
        if isinstance(node, ast.ClassDef):
            bases = (_dotted(b) for b in node.bases)
            mod.bases[qualname] = [q for q in (_qualify(mod, b, module_defs) for b in bases if b) if q]
            attr_types[qualname] = _class_attr_types(node, mod, module_defs)
    for node, qualname, class_name in defs:
        if isinstance(node, ast.ClassDef):
            continue
        types = attr_types.get(class_name or "", {})
        scanner = _BodyScanner(mod, node, qualname, class_name, module_defs, guess_same_module, types)  # type: ignore[arg-type]
        scanner.scan(node.body)  # type: ignore[attr-defined]
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
        return facts_from_tree(tree, ModuleFacts(item.module, item.origin, item.path, item.is_package, rid))
    except RecursionError as exc:  # pathologically nested generated code
        return FileRejection(rid, MineReason.SYNTAX_ERROR, f"RecursionError while scanning: {exc}"[:300])


def _parse_chunk(items: Sequence[FileItem]) -> list[ModuleFacts | FileRejection]:
    return [parse_file(i) for i in items]


# -- file discovery -------------------------------------------------------------------------------
def module_name(rel: Path) -> tuple[str, bool]:
    parts = list(rel.with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts = parts[:-1]
    return ".".join(parts), is_package


def tree_files(root: Path, origin: str, skip_dirs: frozenset[str] = SKIP_DIRS) -> list[FileItem]:
    """``*.py`` files under ``root`` as importable modules, not entering test folders."""
    out: list[FileItem] = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in skip_dirs and d.isidentifier())
        for name in sorted(names):
            if name.endswith(".py") and name[:-3].isidentifier():
                path = Path(folder, name)
                mod, is_package = module_name(path.relative_to(root))
                if mod:
                    out.append(FileItem(str(path), mod, is_package, origin))
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

    def _module_prefix(self, parts: list[str]) -> int:
        for n in range(len(parts), 0, -1):
            name = ".".join(parts[:n])
            if name in self.modules or name in self.ambiguous_modules:
                return n
        return 0

    def return_class(self, callee: str, depth: int) -> str | None:
        """Qualified class named by ``callee``'s return annotation (a plain or quoted dotted name)."""
        target, _, _ = self.resolve(callee, depth + 1)
        ann = (target.facts.return_annotation or "").strip("'\"") if target is not None else ""
        if not ann or not all(p.isidentifier() for p in ann.split(".")):
            return None
        mod = self.modules[target.module]  # type: ignore[union-attr]
        head, _, tail = ann.partition(".")
        if head in mod.imports:
            base = mod.imports[head]
        elif head in mod.classes:
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
        for source in mod.star_imports[:MAX_STAR_SOURCES] if depth < 2 else ():  # ``from .core import *`` re-exports
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
    import docstring_parser  # rare path: parse only here

    try:
        names = {p.arg_name.lstrip("*") for p in docstring_parser.parse(consumer.docstring).params if p.arg_name}
    except Exception:
        return False
    return param in names


@dataclass
class MineResult:
    flows: list[MinedFlow]
    rejections: list[CandidateRejection]
    file_rejections: list[FileRejection]
    targets: dict[str, Target]  # every function a flow touches, plus all documented ones for negatives
    documented: dict[str, Target]  # every documented function read (for hard negatives)
    files_read: int
    files_parsed: int
    candidates: int
    parsed_ids: list[str] = field(default_factory=list)
    output_names: dict[str, str] = field(default_factory=dict)  # target key -> what callers name its result

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
    param = _consumer_param(consumer.facts, raw.slot, raw.bound)
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
    ambiguous: set[str] = set()
    for m in modules:
        if isinstance(m, FileRejection):
            file_rejections.append(m)
            continue
        parsed_ids.append(m.source_id)
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
    return list(by_name.values()), ambiguous


def resolve_flows(parsed: Iterable[ModuleFacts | FileRejection], files_read: int) -> MineResult:
    file_rejections: list[FileRejection] = []
    parsed_ids: list[str] = []
    modules, ambiguous = _merge(parsed, file_rejections, parsed_ids)
    table = SymbolTable([m for m in modules if m.module not in ambiguous], ambiguous)
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
    assert len(flows) + len(rejections) == candidates, "every candidate ends accepted or rejected"
    documented = {
        f"{m.module}.{q}": Target(f"{m.module}.{q}", m.module, f)
        for m in modules if m.module not in ambiguous
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
    from tasks.schema_rule import GENERIC_OUTPUT_NAMES

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


def mine_files(items: Sequence[FileItem], workers: int = 2, chunk_files: int = 64) -> MineResult:
    """Parse ``items`` in ``workers`` processes (in-process when workers <= 1), then resolve."""
    return resolve_flows(map_chunks(_parse_chunk, items, workers, chunk_files), len(items))


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


if __name__ == "__main__":  # quick look: python -m tasks.mining DIR
    res = mine_files(tree_files(Path(sys.argv[1]), "tree"))
    print(len(res.flows), res.candidates, res.reason_counts())
