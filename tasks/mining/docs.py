"""API docs built deterministically from a Python function's signature and docstring (no LLM).

The doc has the shape agent 1 writes (schemas/api_doc.schema.json), so mined pairs and LLM pairs
are interchangeable training data. Docstrings in Google, NumPy and reST (Sphinx/Epydoc) style are
read with ``docstring_parser``; what a docstring does not say comes from the signature.
"""
from __future__ import annotations

import ast
from collections import Counter
from dataclasses import dataclass
from typing import Any

import docstring_parser

from schemas.name_rule import PRODUCER_VERBS, identifier_tokens, name_derived_output
from tasks.mining.syntax import child_nodes
from tasks.toolsets.readers import ImportReport, make_doc

ANY_TYPE = "any"


@dataclass(frozen=True)
class ParamFacts:
    name: str
    annotation: str | None  # ast.unparse of the annotation
    kind: str  # positional | keyword_only | var_positional | var_keyword


@dataclass(frozen=True)
class FunctionFacts:
    """What the miner keeps of a def: enough to build its doc later and to map call arguments."""

    qualname: str  # Class.method, or the function name
    docstring: str  # "" when undocumented
    params: tuple[ParamFacts, ...]  # without the implicit self/cls of methods
    return_annotation: str | None
    returns_value: bool  # a ``return <expr>``/``yield`` or a non-None return annotation
    lineno: int = 0
    binding: str = "function"  # function | instance | class | static: how a call binds the first argument
    params_known: bool = True  # False for a class without its own __init__ (inherited: see the bases)
    # what every ``return`` gives, read from the body (tasks.mining.resolve resolves it in the function's module):
    # "Self" (``return self`` / ``return cls(...)``), or the dotted callee ``D`` of ``return D(...)``
    inferred_return: str | None = None
    tuple_arity: int | None = None  # every return is an n-item tuple display, or the annotation is tuple[A, B, ...]
    returns_items: bool = False  # a call gives a collection of like items: a generator, list/Iterator/... annotated, list displays
    # an undocumented override's docstring is its base method's (``inspect.getdoc``'s rule): that method's key, else ""
    docstring_from: str = ""

    @property
    def documented(self) -> bool:
        return bool(self.docstring.strip())

    @property
    def name(self) -> str:
        return self.qualname.rsplit(".", 1)[-1]

    def positional_names(self) -> list[str]:
        return [p.name for p in self.params if p.kind == "positional"]

    def param_for_position(self, index: int) -> str | None:
        """The parameter a positional argument at ``index`` binds to (``*args`` beyond the end)."""
        names = self.positional_names()
        if index < len(names):
            return names[index]
        star = next((p.name for p in self.params if p.kind == "var_positional"), None)
        return star

    def accepts_keyword(self, name: str) -> bool:
        if any(p.name == name and p.kind in ("positional", "keyword_only") for p in self.params):
            return True
        return any(p.kind == "var_keyword" for p in self.params)


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


@dataclass
class BodyIndex:
    """One walk over a def (tasks.mining.flow and .parse reuse it): its own returns and yields, and the names and
    attributes of its first parameter (``self``) bound anywhere inside it, nested scopes included."""

    returns: list[ast.expr]  # values of its own ``return <value>`` (nested defs excluded)
    has_yield: bool  # its own yield: a generator
    stores: set[str]  # names assigned (ast.Name stores), nested scopes included
    scoped: set[str]  # names of nested defs and classes
    imported: set[str]  # names bound by imports inside
    global_names: set[str]  # ``global x`` declarations
    attr_binds: Counter[str]  # self.<attr> stores and deletes, self being the first parameter
    attr_assigns: list[ast.Assign | ast.AnnAssign]  # statements that assign a self.<attr>
    raises: list[ast.Raise]  # its own ``raise <exception>`` statements (nested defs excluded), in walk order
    calls: list[ast.Call]  # every call in it, nested scopes included


def index_body(node: ast.FunctionDef | ast.AsyncFunctionDef) -> BodyIndex:
    positional = [*node.args.posonlyargs, *node.args.args]
    me = positional[0].arg if positional else None
    index = BodyIndex([], False, set(), set(), set(), set(), Counter(), [], [], [])
    stack: list[tuple[ast.AST, bool]] = [(n, True) for n in node.body]
    while stack:
        n, own = stack.pop()
        cls = n.__class__
        if cls is ast.Name:
            if n.ctx.__class__ is ast.Store:  # type: ignore[attr-defined]
                index.stores.add(n.id)  # type: ignore[attr-defined]
            continue
        if cls is ast.Attribute:
            v = n.value  # type: ignore[attr-defined]
            if v.__class__ is ast.Name and v.id == me and n.ctx.__class__ is not ast.Load:  # type: ignore[attr-defined]
                index.attr_binds[n.attr] += 1  # type: ignore[attr-defined]
        elif cls is ast.Return:
            if own and n.value is not None:  # type: ignore[attr-defined]
                index.returns.append(n.value)  # type: ignore[attr-defined]
        elif cls is ast.Yield or cls is ast.YieldFrom:
            index.has_yield = index.has_yield or own
        elif cls is ast.Call:
            index.calls.append(n)  # type: ignore[arg-type]
        elif cls is ast.Raise:
            if own and n.exc is not None:  # type: ignore[attr-defined]
                index.raises.append(n)  # type: ignore[arg-type]
        elif cls is ast.Assign or cls is ast.AnnAssign:
            targets = n.targets if cls is ast.Assign else [n.target]  # type: ignore[attr-defined]
            if any(t.__class__ is ast.Attribute and t.value.__class__ is ast.Name and t.value.id == me for t in targets):
                index.attr_assigns.append(n)  # type: ignore[arg-type]
        elif cls is ast.Import or cls is ast.ImportFrom:
            index.imported.update((al.asname or al.name).split(".")[0] for al in n.names)  # type: ignore[attr-defined]
            continue
        elif cls is ast.Global:
            index.global_names.update(n.names)  # type: ignore[attr-defined]
            continue
        elif isinstance(n, _SCOPES):
            if cls is not ast.Lambda:
                index.scoped.add(n.name)  # type: ignore[attr-defined]
            own = False
        stack.extend((c, own) for c in child_nodes(n))
    return index


def _returns_value(node: ast.FunctionDef | ast.AsyncFunctionDef, index: BodyIndex) -> bool:
    if node.returns is not None and not _is_none(node.returns):
        return True
    return index.has_yield or any(not _is_none(v) for v in index.returns)


def _is_none(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Constant) and expr.value is None


def _dotted_name(expr: ast.AST) -> str | None:
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    return ".".join([expr.id, *reversed(parts)]) if isinstance(expr, ast.Name) else None


def _inferred_return(node: ast.FunctionDef | ast.AsyncFunctionDef, index: BodyIndex, binding: str) -> str | None:
    """One type for every non-None ``return``: "Self" when each returns ``self`` (an instance method)
    or ``cls(...)`` (a classmethod); the dotted callee ``D`` when each returns a call ``D(...)`` of a
    module-level name (not a local), or a local every binding of which is ``v = D(...)``
    (``G = Graph(); ...; return G``); else None."""
    if index.has_yield:
        return None
    values = [v for v in index.returns if not _is_none(v)]
    locals_by_call = _local_call_bindings(node) if any(isinstance(v, ast.Name) for v in values) else {}
    found = {_return_kind(v, node, binding, locals_by_call) for v in values}
    if len(found) != 1 or None in found:
        return None
    kind = found.pop()
    head = kind.split(".")[0]
    a = node.args
    params = {p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x)]}
    if kind != "Self" and (head in index.stores or head in index.scoped or head in index.imported or head in params):
        return None  # a local name: not the module-level one
    return kind


def _return_kind(value: ast.expr, node: ast.FunctionDef | ast.AsyncFunctionDef, binding: str,
                 locals_by_call: dict[str, str | None] | None = None) -> str | None:
    positional = [*node.args.posonlyargs, *node.args.args]
    first = positional[0].arg if positional and binding in ("instance", "class") else None
    if isinstance(value, ast.Await):
        value = value.value
    if isinstance(value, ast.Name) and binding == "instance" and value.id == first:
        return "Self"
    if isinstance(value, ast.Name):
        return (locals_by_call or {}).get(value.id)  # a parameter or a local bound otherwise: unknown
    if isinstance(value, ast.Call):
        if binding == "class" and isinstance(value.func, ast.Name) and value.func.id == first:
            return "Self"
        return _dotted_name(value.func)
    return None


def _local_call_bindings(node: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, str | None]:
    """Local name -> the dotted callee ``D`` when every binding of the name in the def's own body is a plain
    ``name = D(...)`` (``name: T = D(...)`` too) of one ``D``; None for a name bound any other way (a loop,
    ``with``, unpacking, ``+=``, ``except .. as``, a pattern, a walrus, ``del``, an import, ``global``/
    ``nonlocal``) or by two callees. Parameters are never in it: a caller's value is of unknown type."""
    by_call: dict[str, set[str]] = {}
    other: set[str] = set()
    call_stores: set[int] = set()  # id() of the Name nodes that a plain ``name = D(...)`` binds
    nested: list[ast.AST] = []
    stack: list[ast.AST] = list(node.body)
    while stack:
        n = stack.pop()
        cls = n.__class__
        if cls in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
            other.add(n.name)  # type: ignore[attr-defined]
            nested.append(n)
            continue  # a nested scope binds its own names (a nonlocal there is caught below)
        if cls is ast.Lambda:
            continue
        if cls is ast.Assign or cls is ast.AnnAssign:
            targets = n.targets if cls is ast.Assign else [n.target]  # type: ignore[attr-defined]
            value = n.value  # type: ignore[attr-defined]
            if isinstance(value, ast.Await):
                value = value.value
            dotted = _dotted_name(value.func) if isinstance(value, ast.Call) else None
            if dotted is not None and len(targets) == 1 and isinstance(targets[0], ast.Name):
                by_call.setdefault(targets[0].id, set()).add(dotted)
                call_stores.add(id(targets[0]))
        elif cls is ast.Name:
            if n.ctx.__class__ is not ast.Load and id(n) not in call_stores:  # type: ignore[attr-defined]
                other.add(n.id)  # type: ignore[attr-defined]
            continue
        elif cls is ast.ExceptHandler and n.name:  # type: ignore[attr-defined]
            other.add(n.name)  # type: ignore[attr-defined]
        elif cls in (ast.MatchAs, ast.MatchStar) and n.name:  # type: ignore[attr-defined]
            other.add(n.name)  # type: ignore[attr-defined]
        elif cls is ast.MatchMapping and n.rest:  # type: ignore[attr-defined]
            other.add(n.rest)  # type: ignore[attr-defined]
        elif cls in (ast.Global, ast.Nonlocal):
            other.update(n.names)  # type: ignore[attr-defined]
        elif cls is ast.Import or cls is ast.ImportFrom:
            other.update((al.asname or al.name).split(".")[0] for al in n.names)  # type: ignore[attr-defined]
        stack.extend(child_nodes(n))
    for scope in nested if by_call else ():  # ``nonlocal v`` in a nested def rebinds this def's v
        other.update(name for n in ast.walk(scope) if isinstance(n, ast.Nonlocal) for name in n.names)
    a = node.args
    other.update(p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x)])
    return {name: next(iter(callees)) if len(callees) == 1 and name not in other else None for name, callees in by_call.items()}


def _tuple_arity(node: ast.FunctionDef | ast.AsyncFunctionDef, index: BodyIndex) -> int | None:
    """n when the return annotation is ``tuple[A, B, ...]`` (n items, no ``...``), else when every
    non-None ``return`` is an n-item tuple display without ``*``; else None."""
    ann = node.returns
    if isinstance(ann, ast.Subscript) and (_dotted_name(ann.value) or "").rsplit(".", 1)[-1] in ("tuple", "Tuple"):
        items = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
        if any(isinstance(i, ast.Constant) and i.value is Ellipsis for i in items):
            return None
        return len(items)
    if ann is not None and not _is_none(ann):
        return None  # annotated as something else
    if index.has_yield:
        return None
    sizes = {len(v.elts) if isinstance(v, ast.Tuple) and not any(isinstance(e, ast.Starred) for e in v.elts) else -1
             for v in index.returns if not _is_none(v)}
    return sizes.pop() if len(sizes) == 1 and -1 not in sizes else None


_ITEM_TYPES = frozenset({"list", "List", "set", "Set", "frozenset", "FrozenSet", "Sequence", "MutableSequence", "Iterator",
                         "Iterable", "Generator", "AsyncIterator", "AsyncIterable", "AsyncGenerator", "Collection",
                         "AbstractSet", "MutableSet", "deque", "Deque"})


def _returns_items(node: ast.FunctionDef | ast.AsyncFunctionDef, index: BodyIndex) -> bool:
    """A call gives like items to iterate: the function is a generator, its return annotation is a
    list / set / Sequence / Iterator / Iterable / Generator (or ``tuple[X, ...]``), or, unannotated,
    every non-None return is a list or set display or comprehension or a generator expression."""
    if index.has_yield:
        return True
    ann = node.returns
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        try:
            ann = ast.parse(ann.value.strip(), mode="eval").body
        except (SyntaxError, ValueError, RecursionError):
            return False
    if ann is not None and not _is_none(ann):
        base = ann.value if isinstance(ann, ast.Subscript) else ann
        name = (_dotted_name(base) or "").rsplit(".", 1)[-1]
        if name in _ITEM_TYPES:
            return True
        if name in ("tuple", "Tuple") and isinstance(ann, ast.Subscript) and isinstance(ann.slice, ast.Tuple):
            items = ann.slice.elts
            return len(items) == 2 and isinstance(items[1], ast.Constant) and items[1].value is Ellipsis
        return False
    values = [v for v in index.returns if not _is_none(v)]
    return bool(values) and all(isinstance(v, (ast.List, ast.ListComp, ast.Set, ast.SetComp, ast.GeneratorExp)) for v in values)


def _unparse(node: ast.AST | None) -> str | None:
    if node is None:
        return None
    try:
        return ast.unparse(node)
    except Exception:  # very deep or odd annotations: the docstring type is used instead
        return None


def function_facts(node: ast.FunctionDef | ast.AsyncFunctionDef, qualname: str, in_class: bool,
                   index: BodyIndex | None = None) -> FunctionFacts:
    """What the miner keeps of a def; ``index``: :func:`index_body` of it when already walked."""
    a = node.args
    positional = [*a.posonlyargs, *a.args]
    decorators = {d.id for d in node.decorator_list if isinstance(d, ast.Name)}
    binding = "function" if not in_class else "static" if "staticmethod" in decorators else "class" if "classmethod" in decorators else "instance"
    if binding in ("instance", "class") and positional:
        positional = positional[1:]  # the bound instance/class, whatever it is called
    params = [ParamFacts(p.arg, _unparse(p.annotation), "positional") for p in positional]
    if a.vararg is not None:
        params.append(ParamFacts(a.vararg.arg, _unparse(a.vararg.annotation), "var_positional"))
    params += [ParamFacts(p.arg, _unparse(p.annotation), "keyword_only") for p in a.kwonlyargs]
    if a.kwarg is not None:
        params.append(ParamFacts(a.kwarg.arg, _unparse(a.kwarg.annotation), "var_keyword"))
    index = index or index_body(node)
    return FunctionFacts(
        qualname=qualname,
        docstring=ast.get_docstring(node, clean=True) or "",
        params=tuple(params),
        return_annotation=_unparse(node.returns),
        returns_value=_returns_value(node, index),
        lineno=node.lineno,
        binding=binding,
        inferred_return=_inferred_return(node, index, binding),
        tuple_arity=_tuple_arity(node, index),
        returns_items=_returns_items(node, index),
    )


def _description(parsed: docstring_parser.Docstring, fallback: str) -> str:
    parts = [s.strip() for s in (parsed.short_description, parsed.long_description) if s and s.strip()]
    return "\n\n".join(parts) or fallback


def output_name(facts: FunctionFacts, return_name: str | None, hint: str | None = None) -> str:
    """The Returns section's name; else a name with a producer verb (``make_token`` -> ``token``);
    else the callers' usual name for the result (``hint``: ``node = parse(src)`` -> ``node``); else
    the function's name; else ``result``."""
    if return_name and return_name.strip() and return_name.strip().isidentifier():
        return return_name.strip()
    derived = name_derived_output(facts.name)
    if derived and identifier_tokens(facts.name)[0] in PRODUCER_VERBS:
        return derived
    return hint or derived or "result"


def doc_from_facts(facts: FunctionFacts, report: ImportReport | None = None, output_hint: str | None = None) -> dict[str, Any] | None:
    """The API doc of a documented function; None when it has no docstring."""
    if not facts.documented:
        return None
    report = report or ImportReport("docstrings")
    try:
        parsed = docstring_parser.parse(facts.docstring)
    except Exception:  # a malformed section: keep the prose, lose the sections
        parsed = docstring_parser.Docstring()
        parsed.short_description = facts.docstring.strip().split("\n\n", 1)[0]
    documented = {p.arg_name.lstrip("*"): p for p in parsed.params if p.arg_name}
    inputs = []
    for p in facts.params:
        info = documented.get(p.name)
        if p.kind.startswith("var_") and info is None:
            continue  # undocumented *args/**kwargs say nothing a tool user can pass
        ptype = p.annotation or (info.type_name if info is not None else None) or ANY_TYPE
        inputs.append((p.name, ptype, info.description if info is not None else ""))
    outputs = []
    if facts.returns_value:
        ret = parsed.returns
        rtype = facts.return_annotation or (ret.type_name if ret is not None else None) or ANY_TYPE
        outputs.append((output_name(facts, ret.return_name if ret is not None else None, output_hint), rtype, (ret.description or "") if ret is not None else ""))
    return make_doc(facts.qualname, _description(parsed, facts.qualname), inputs, outputs, report)


def functions_in_source(source: str) -> dict[str, FunctionFacts]:
    """Facts of module-level functions and methods of module-level classes, by qualified name."""
    out: dict[str, FunctionFacts] = {}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name] = function_facts(node, node.name, in_class=False)
        elif isinstance(node, ast.ClassDef):
            for child in node.body:
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    q = f"{node.name}.{child.name}"
                    out[q] = function_facts(child, q, in_class=True)
    return out


def docs_from_source(source: str) -> dict[str, dict[str, Any]]:
    """API docs of the documented functions in ``source`` (convenience for tests and notebooks)."""
    docs = {q: doc_from_facts(f) for q, f in functions_in_source(source).items()}
    return {q: d for q, d in docs.items() if d is not None}
