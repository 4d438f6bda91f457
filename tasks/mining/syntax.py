"""Reading Python syntax trees: module-level statements through if/try/with blocks, the names statements
bind, dotted names, the one class an annotation names, and a node's children (the walkers' step)."""
from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Iterable, Iterator


def top_level_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Module statements, descending into if/try/with blocks (conditional imports and defs)."""
    for node in body:
        yield node
        if isinstance(node, (ast.If, ast.Try, ast.With, ast.AsyncWith)) or node.__class__.__name__ == "TryStar":
            for name in ("body", "orelse", "finalbody"):
                yield from top_level_statements(getattr(node, name, None) or [])
            for handler in getattr(node, "handlers", None) or []:
                yield from top_level_statements(handler.body)


def store_names(target: ast.AST) -> Iterator[str]:
    for n in ast.walk(target):
        if isinstance(n, ast.Name):
            yield n.id


def unwrap(expr: ast.expr) -> ast.expr:
    return expr.value if isinstance(expr, ast.Await) else expr


def dotted_name(expr: ast.AST) -> str | None:
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    return ".".join([expr.id, *reversed(parts)])


def bound_names(statements: Iterable[ast.stmt]) -> Counter[str]:
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
                counts.update(store_names(t))
    return counts


_OPTIONAL = frozenset({"Optional", "typing.Optional", "t.Optional", "typing_extensions.Optional"})
_UNION = frozenset({"Union", "typing.Union", "t.Union", "typing_extensions.Union"})
_WRAPPERS = frozenset({"Annotated", "typing.Annotated", "typing_extensions.Annotated", "Final", "typing.Final",
                       "ClassVar", "typing.ClassVar"})


def _quoted(read, text: str, depth: int) -> str | None:
    """``read`` of a quoted annotation (``"Foo"``) parsed; None when it does not parse."""
    try:
        return read(ast.parse(text.strip(), mode="eval").body, depth + 1)
    except (SyntaxError, ValueError, RecursionError):
        return None


def annotated_class(expr: ast.AST | None, depth: int = 0) -> str | None:
    """The one class an annotation names, as written: ``Foo``, ``"Foo"``, ``mod.Foo``, ``Optional[Foo]``,
    ``Foo | None``, ``Union[Foo, None]``, ``Annotated[Foo, ...]``; None for anything else (generics,
    unions of two classes, ...)."""
    if expr is None or depth > 3:
        return None
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return _quoted(annotated_class, expr.value, depth)
    if isinstance(expr, (ast.Name, ast.Attribute)):
        dotted = dotted_name(expr)
        return None if dotted in ("None", "Any", "typing.Any", "object") else dotted
    if isinstance(expr, ast.Subscript):
        base = dotted_name(expr.value) or ""
        items = list(expr.slice.elts) if isinstance(expr.slice, ast.Tuple) else [expr.slice]
        if base in _OPTIONAL:
            return annotated_class(items[0], depth + 1)
        if base in _WRAPPERS:
            return annotated_class(items[0], depth + 1)
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
    rest = [m for m in members if not (isinstance(m, ast.Constant) and m.value is None) and dotted_name(m) != "None"]
    return annotated_class(rest[0], depth + 1) if len(rest) == 1 else None


def _of_text(read, text: str | None) -> str | None:
    """``read`` (an ``annotated_*`` function) of an annotation kept as text; None when it does not parse."""
    if not text:
        return None
    try:
        return read(ast.parse(text.strip(), mode="eval").body)
    except (SyntaxError, ValueError, RecursionError):
        return None


def annotation_class(text: str | None) -> str | None:
    """:func:`annotated_class` of an annotation kept as text (``FunctionFacts.return_annotation``)."""
    return _of_text(annotated_class, text)


# generics whose iteration gives items of their first parameter: ``for x in xs`` with ``xs: list[Foo]`` gives Foos
_ITEM_GENERICS = frozenset({"list", "List", "set", "Set", "frozenset", "FrozenSet", "Sequence", "MutableSequence",
                            "Iterator", "Iterable", "Generator", "Collection", "AbstractSet", "MutableSet", "deque",
                            "Deque", "AsyncIterator", "AsyncIterable", "AsyncGenerator"})


def annotated_item_class(expr: ast.AST | None, depth: int = 0) -> str | None:
    """The one class of the items of a collection annotation, as written: ``list[Foo]``, ``Sequence["Foo"]``,
    ``Iterator[Foo]``, ``Generator[Foo, None, None]``, ``tuple[Foo, ...]``, also inside ``Optional[...]`` /
    ``... | None``; None for anything else (``dict``, ``tuple[A, B]``, items of two classes, ...)."""
    if expr is None or depth > 3:
        return None
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return _quoted(annotated_item_class, expr.value, depth)
    if isinstance(expr, ast.Subscript):
        base = dotted_name(expr.value) or ""
        items = list(expr.slice.elts) if isinstance(expr.slice, ast.Tuple) else [expr.slice]
        if base in _OPTIONAL or base in _WRAPPERS:
            return annotated_item_class(items[0], depth + 1)
        if base in _UNION:
            rest = [m for m in items if not (isinstance(m, ast.Constant) and m.value is None) and dotted_name(m) != "None"]
            return annotated_item_class(rest[0], depth + 1) if len(rest) == 1 else None
        name = base.rsplit(".", 1)[-1]
        if name in ("tuple", "Tuple"):
            ellipsis = len(items) == 2 and isinstance(items[1], ast.Constant) and items[1].value is Ellipsis
            return annotated_class(items[0], depth + 1) if ellipsis else None
        return annotated_class(items[0], depth + 1) if name in _ITEM_GENERICS else None
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.BitOr):
        members = [m for m in (expr.left, expr.right)
                   if not (isinstance(m, ast.Constant) and m.value is None) and dotted_name(m) != "None"]
        return annotated_item_class(members[0], depth + 1) if len(members) == 1 else None
    return None


def annotation_item_class(text: str | None) -> str | None:
    """:func:`annotated_item_class` of an annotation kept as text (``FunctionFacts.return_annotation``)."""
    return _of_text(annotated_item_class, text)


_CHILD_FIELDS: dict[type, tuple[tuple[str, int], ...]] = {}
_LEAVES = frozenset({ast.Name, ast.Constant, ast.Pass, ast.Break, ast.Continue, ast.Global, ast.Nonlocal, ast.alias})
_LISTS_WITH_NON_NODES = frozenset({"keys", "kw_defaults", "kwd_attrs", "names"})  # None or str items


def _child_fields(cls: type) -> tuple[tuple[str, int], ...]:
    """(field, kind) in order: 0 a single node or None, 1 a list of nodes, 2 a list that may hold None or str."""
    if cls in _LEAVES:
        return ()
    # the node's signature in its docstring marks sequences: "Call(expr func, expr* args, keyword* keywords)"
    signature = (cls.__doc__ or "").split("\n", 1)[0]
    return tuple((f, 0 if not re.search(rf"\*\s+{f}\b", signature) else 2 if f in _LISTS_WITH_NON_NODES else 1)
                 for f in cls._fields if f not in ("ctx", "type_comment"))  # type: ignore[attr-defined]


def child_nodes(node: ast.AST) -> list[ast.AST]:
    """``ast.iter_child_nodes`` as a list (same order), faster: expression contexts (Load/Store) and
    fields that never hold nodes are skipped."""
    cls = node.__class__
    fields = _CHILD_FIELDS.get(cls)
    if fields is None:
        fields = _CHILD_FIELDS[cls] = _child_fields(cls)
    out: list[ast.AST] = []
    for name, kind in fields:
        value = getattr(node, name, None)
        if kind == 0:
            if value is not None and isinstance(value, ast.AST):
                out.append(value)
        elif value:
            if kind == 1:
                out.extend(value)
            else:
                out.extend(v for v in value if isinstance(v, ast.AST))
    return out
