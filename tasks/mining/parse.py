"""Parse phase (worker processes, one file at a time): a module's functions (:class:`FunctionFacts`), its
import table and every candidate flow, with both call targets written as qualified names through the
module's own definitions and imports (``c.f`` after ``import a.b as c`` is ``a.b.f``)."""
from __future__ import annotations

import ast
import io
import os
import tokenize
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from tasks.mining.docs import BodyIndex, FunctionFacts, ParamFacts, function_facts, index_body
from tasks.mining.doctests import doctest_bodies
from tasks.mining.facts import MODULE_BODY, FileRejection, ModuleFacts
from tasks.mining.flow import BodyScanner, ClassFlows, attr_binding_counts
from tasks.mining.order import OrderScanner
from tasks.mining.reasons import MineReason
from tasks.mining.resolve import bind_import, import_base, type_of_call
from tasks.mining.sources import FileItem
from tasks.mining.state import stated_orders, unset_module_globals
from tasks.mining.syntax import annotated_class, bound_names, dotted_name, top_level_statements, unwrap
from tasks.mining.workers import no_gc


MAX_FILE_BYTES = 1_000_000
# names a stdlib module binds per platform in if/else branches (the last branch would win): the running one's
_PLATFORM_IMPORTS = {"os": {"path": os.path.__name__}}


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
            and not n.target.id.startswith("_") and "ClassVar" not in (dotted_name(getattr(n.annotation, "value", n.annotation)) or "")
        )
    known = init is not None or bool(params) or not cls.bases
    return FunctionFacts(cls.name, doc, params, cls.name, True, cls.lineno, "function", params_known=known)


def _annotation(node: ast.AST) -> str | None:
    try:
        return ast.unparse(node)
    except Exception:
        return None


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
    """``attr: Foo`` in the class body, and in its methods ``self.attr = Foo(...)`` / ``= f(...)`` / ``= self.m(...)``,
    ``self.attr: Foo = ...`` and ``self.attr = p`` for a parameter ``p: Foo``, so ``self.attr.m()``
    resolves; an attribute that is given two different types, or any value of unknown type, is left out."""
    found: dict[str, set[str | None]] = {}

    def annotated(node: ast.AST | None) -> str | None:
        dotted = annotated_class(node)
        return _qualify(mod, dotted, module_defs) if dotted else None

    for n in cls.body:
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
            found.setdefault(n.target.id, set()).add(annotated(n.annotation))
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_property(n) and not any(
                (dotted_name(d) or "").endswith((".setter", ".deleter")) for d in n.decorator_list):
            found.setdefault(n.name, set()).add(annotated(n.returns))  # @property def x(self) -> Foo
    for method in cls.body:
        if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) or not method.args.args:
            continue
        if any(dotted_name(d) == "staticmethod" for d in method.decorator_list):
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
                value = unwrap(n.value)
                for t in n.targets:
                    if not (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == me):
                        continue
                    plain[t.attr] += 1
                    if isinstance(value, ast.Call):
                        dotted = dotted_name(value.func)
                        if dotted and dotted.count(".") == 1 and dotted.split(".")[0] == me:
                            q = f"{mod.module}.{cls.name}.{dotted.split('.')[1]}"  # self.x = self.make(): what make returns
                        else:
                            q = _qualify(mod, dotted, module_defs) if dotted else None
                        found.setdefault(t.attr, set()).add(type_of_call(q) if q else None)
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
    return any(dotted_name(d) in _OVERLOADS for d in node.decorator_list)


def _is_property(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A property's getter/setter/deleter: ``obj.x(...)`` calls the value, never this def."""
    for d in node.decorator_list:
        dotted = dotted_name(d) or ""
        if dotted in _PROPERTIES or dotted.endswith((".setter", ".getter", ".deleter")):
            return True
    return False


def _functions_and_classes(mod: ModuleFacts, tree: ast.Module) -> list[tuple[ast.AST, str, str | None]]:
    """Module-level functions and methods of module-level classes: (node, qualname, class name)."""
    found: list[tuple[ast.AST, str, str | None]] = []
    for node in top_level_statements(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if not _is_stub(node):
                found.append((node, node.name, None))
        elif isinstance(node, ast.ClassDef):
            mod.classes.add(node.name)
            found.append((node, node.name, None))
            for child in top_level_statements(node.body):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _is_stub(child) and not _is_property(child):
                    found.append((child, f"{node.name}.{child.name}", node.name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bind_import(node, mod.module, mod.is_package, mod.imports)
            if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
                base = import_base(mod.module, mod.is_package, node.level) if node.level else ""
                source = ".".join(p for p in (base, node.module or "") if p)
                if source:
                    mod.star_imports.append(source)
    return found


def _module_bindings(mod: ModuleFacts, tree: ast.Module, module_defs: set[str], indexes: dict[int, BodyIndex]) -> None:
    """Names bound once at module level (and never rebound through ``global``): ``Eq = Equality`` /
    ``fn = pkg.mod.func`` resolve like imports (``mod.imports``); ``log = Logger(...)`` / ``log: Logger``
    give the name a type (``mod.global_types``); ``CONFIG = load_config(...)`` holds that call's value
    (``mod.global_values``). ``plus = add`` (a method of the same class) and ``f = staticmethod(func)``
    bound once in a class body resolve to that method / function."""
    statements = list(top_level_statements(tree.body))
    candidates = [(t.id, n) for n in statements if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None
                  for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)]
    if candidates:
        counts = bound_names(statements)
        rebound = {name for index in indexes.values() for name in index.global_names}
        for name, n in candidates:  # A = B = C binds both A and B
            if counts[name] != 1 or name in rebound:
                continue
            value = unwrap(n.value)  # type: ignore[arg-type]
            if isinstance(n, ast.AnnAssign):
                dotted = annotated_class(n.annotation)
                q = _qualify(mod, dotted, module_defs) if dotted else None
                if q:
                    mod.global_types[name] = q
            if isinstance(value, (ast.Name, ast.Attribute)):
                dotted = dotted_name(value)
                q = _qualify(mod, dotted, module_defs) if dotted and dotted.split(".")[0] != name else None
                if q:
                    mod.imports[name] = q
            elif isinstance(value, ast.Call):
                dotted = dotted_name(value.func)
                q = _qualify(mod, dotted, module_defs) if dotted else None
                if q:
                    mod.global_values[name] = q
                    mod.global_types.setdefault(name, type_of_call(q))
    for cls in statements:
        if not isinstance(cls, ast.ClassDef):
            continue
        body = list(top_level_statements(cls.body))
        methods = {n.name for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        counts = None
        for n in body:
            if not (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)):
                continue
            value, target = n.value, None
            if isinstance(value, ast.Name) and value.id in methods:
                target = f"{mod.module}.{cls.name}.{value.id}"
            elif (isinstance(value, ast.Call) and dotted_name(value.func) == "staticmethod" and len(value.args) == 1
                  and not value.keywords and isinstance(value.args[0], (ast.Name, ast.Attribute))):
                dotted = dotted_name(value.args[0])  # __call__ = staticmethod(sympify): the function itself, nothing bound
                target = _qualify(mod, dotted, module_defs) if dotted and dotted not in methods else None
            if target is not None:
                counts = counts or bound_names(body)
                name = n.targets[0].id
                if counts[name] == 1 and f"{cls.name}.{name}" not in mod.functions:
                    mod.imports[f"{cls.name}.{name}"] = target


def _bare_function(name: str, body: list[ast.stmt]) -> ast.FunctionDef:
    """Statements outside any def (a module's top level, a docstring's examples) as a function of no parameters, the
    shape :class:`BodyScanner` reads."""
    return ast.FunctionDef(name=name, args=ast.arguments([], [], None, [], [], None, []), body=body, decorator_list=[])


def facts_from_tree(tree: ast.Module, mod: ModuleFacts, guess_same_module: bool = False, orders: bool = True,
                    doctests: bool = True, keyed_state: bool = False) -> ModuleFacts:
    """``orders``: also collect precondition candidates (``mod.orders``, tasks/mining/order.py); ``doctests``: from the
    docstrings' usage examples too (tasks/mining/doctests.py); ``keyed_state``: the stated pattern ``keyed_state``
    too (tasks/mining/state.py)."""
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
    if mod.star_imports:
        mod.module_names = frozenset(bound_names(top_level_statements(tree.body)))
    _module_bindings(mod, tree, module_defs, indexes)
    attr_types: dict[str, dict[str, str]] = {}
    class_flows: dict[str, ClassFlows] = {}
    for node, qualname, class_name in defs:
        if isinstance(node, ast.ClassDef):
            bases = (dotted_name(b.value if isinstance(b, ast.Subscript) else b) for b in node.bases)  # Base[T] is Base
            mod.bases[qualname] = [q for q in (_qualify(mod, b, module_defs) for b in bases if b) if q]
            attr_types[qualname] = mod.attr_types[qualname] = _class_attr_types(node, mod, module_defs, indexes)
            class_flows[qualname] = ClassFlows(attr_binding_counts(node, indexes))
            mod.attr_bound[qualname] = frozenset(a for a, n in class_flows[qualname].attr_bindings.items() if n)
    for node, qualname, class_name in defs:
        if isinstance(node, ast.ClassDef):
            continue
        types = attr_types.get(class_name or "", {})
        scanner = BodyScanner(mod, node, qualname, class_name, module_defs, guess_same_module, types,  # type: ignore[arg-type]
                               class_flows=class_flows.get(class_name or ""), index=indexes[id(node)])
        if orders:
            scanner.order = OrderScanner(scanner)
        scanner.scan(node.body)  # type: ignore[attr-defined]
    for flows in class_flows.values():
        mod.flows.extend(flows.flows())
    if orders:  # a function that raises unless another has set some state: "call that first", in its own words
        mod.orders.extend(stated_orders(mod, defs, indexes, unset_module_globals(tree.body), keyed_state))
    body = [s for s in tree.body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    if body:  # statements at module level (scripts, ``if __name__ == "__main__":``, module setup) are a body too
        scanner = BodyScanner(mod, _bare_function(MODULE_BODY, body), MODULE_BODY, None, module_defs, guess_same_module)
        if orders:
            scanner.order = OrderScanner(scanner)
        scanner.scan(body)
    if orders and doctests:  # usage examples: call orders only, the data flows stay the code's own
        flows, assigned = len(mod.flows), len(mod.assigned)
        for example in doctest_bodies(tree):
            scanner = BodyScanner(mod, _bare_function(example.qualname, example.body), example.qualname, None, module_defs,
                                  guess_same_module)
            scanner.order = OrderScanner(scanner, doctest_shown=example.shown,
                                         doctest_function=f"{mod.module}.{example.function}" if example.function else None)
            scanner.scan(example.body)
        del mod.flows[flows:], mod.assigned[assigned:]
    return mod


def parse_file(item: FileItem, orders: bool = True, test_orders: bool = False, doctests: bool = True,
               keyed_state: bool = False) -> ModuleFacts | FileRejection:
    """One source file's facts, or why it could not be read (never raises on bad files); ``orders``:
    with precondition candidates, in test code (``FileItem.flows_only``) only with ``test_orders``: they would
    all be rejected there (``test_order``), and test code holds a fifth of the files and two fifths of the work."""
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
        scan_orders = orders and (test_orders or not item.flows_only)
        return facts_from_tree(tree, ModuleFacts(item.module, item.origin, item.path, item.is_package, rid, flows_only=item.flows_only,
                                                 orders_read=scan_orders), orders=scan_orders, doctests=doctests,
                               keyed_state=keyed_state)
    except RecursionError as exc:  # pathologically nested generated code
        return FileRejection(rid, MineReason.SYNTAX_ERROR, f"RecursionError while scanning: {exc}"[:300])


def parse_chunk(items: Sequence[FileItem], orders: bool = True, test_orders: bool = False,
                doctests: bool = True, keyed_state: bool = False) -> list[ModuleFacts | FileRejection]:
    with no_gc():
        return [parse_file(i, orders, test_orders, doctests, keyed_state) for i in items]


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
    scanner = BodyScanner(mod, node, qualname, class_name, set(), guess_same_module=True)
    scanner.order = OrderScanner(scanner)
    scanner.scan(node.body)
    return mod
