"""Data flow in one function body -> candidate flows (:class:`RawFlow`): the value returned by a function ``f``
that reaches an argument of a function ``g`` says "g depends on f": directly (``g(f(x))``) or through a local
variable (``v = f(x); ...; g(v)``, the latest assignment of ``v`` before the call in the same body)."""
from __future__ import annotations

import ast
import builtins
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from tasks.mining.docs import BodyIndex, index_body
from tasks.mining.facts import MODULE_BODY, ModuleFacts, RawFlow
from tasks.mining.order import OrderScanner
from tasks.mining.reasons import MineReason
from tasks.mining.resolve import EACH_ITEM, bind_import, tuple_item, type_of_call
from tasks.mining.syntax import (annotated_class, annotated_item_class, bound_names, child_nodes, dotted_name,
                                 store_names, top_level_statements, unwrap)


_BUILTINS = frozenset(dir(builtins))


# builtins whose result is the argument's data in another container or form (looked through like await)
_VALUE_BUILTINS = frozenset({"list", "tuple", "set", "frozenset", "sorted", "dict", "iter", "str", "bytes", "int", "float"})
_CASTS = frozenset({"typing.cast", "typing_extensions.cast"})
_BODY_EXITS = (ast.Raise, ast.Return, ast.Continue, ast.Break)  # ``if not isinstance(x, Foo): raise``: x is a Foo after


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


@dataclass
class ClassFlows:
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


def attr_binding_counts(cls: ast.ClassDef, indexes: dict[int, BodyIndex]) -> Counter[str]:
    """How often each ``self.<attr>`` is bound in the methods of ``cls`` (class-level names count too)."""
    counts: Counter[str] = Counter(bound_names(top_level_statements(cls.body)))
    for method in cls.body:
        if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) and method.args.args:
            counts.update((indexes.get(id(method)) or index_body(method)).attr_binds)  # properties too
    return counts


class BodyScanner:
    """Straight-line reaching definitions of one function body, emitting candidate flows."""

    def __init__(self, mod: ModuleFacts, node: ast.FunctionDef | ast.AsyncFunctionDef, qualname: str,
                 class_name: str | None, module_defs: set[str], guess_same_module: bool,
                 attr_types: dict[str, str] | None = None, enclosing: BodyScanner | None = None,
                 class_flows: ClassFlows | None = None, index: BodyIndex | None = None):
        self.mod, self.qualname, self.class_name = mod, qualname, class_name
        self.class_flows = enclosing.class_flows if enclosing is not None else class_flows
        self.module_defs, self.guess = module_defs, guess_same_module
        self.attr_types = attr_types or {}  # self.<attr> -> type string of the class
        a = node.args
        positional = [*a.posonlyargs, *a.args]
        decorators = {dotted_name(d) for d in node.decorator_list}
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
        # call order without data flow (tasks/mining/order.py); parse.py turns it on; a nested def has its own
        self.order: OrderScanner | None = OrderScanner(self) if enclosing is not None and enclosing.order is not None else None
        # name -> type string of its items: ``xs: list[Foo]`` makes ``for x in xs: x.m()`` a call of ``Foo.m``
        self.item_types: dict[str, str] = {}
        for p in [*positional, *a.kwonlyargs]:
            if p.arg == self.self_name:
                continue
            resolved = self._annotation_type(p.annotation)
            if resolved:
                self.types[p.arg] = resolved
            item = self._item_annotation_type(p.annotation)
            if item:
                self.item_types[p.arg] = item

    # name resolution -------------------------------------------------------------------------
    def _annotation_type(self, annotation: ast.AST | None) -> str | None:
        dotted = annotated_class(annotation)
        return self._resolve_global(dotted) if dotted else None

    def _item_annotation_type(self, annotation: ast.AST | None) -> str | None:
        if annotation is None:
            return None
        dotted = annotated_item_class(annotation)
        return self._resolve_global(dotted) if dotted else None

    def _resolve_global(self, dotted: str) -> str | None:
        head, _, tail = dotted.partition(".")
        base = self.local_imports.get(head) or self.mod.imports.get(head)
        if base is None and (head in self.module_defs or self._from_star_import(head)):
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
        if self._from_star_import(name):  # the symbol table follows the module's star imports
            return f"{self.mod.module}.{name}", ""
        if self.guess:  # a lone function record: the name is another record of the same file
            return f"{self.mod.module}.{name}", ""
        return None, f"unknown name {name}"

    def _from_star_import(self, name: str) -> bool:
        """A name bound nowhere in the module, not a builtin, in a module with ``from m import *``: one of
        those imports binds it (``from tkinter import *; Text(...)``)."""
        return (bool(self.mod.star_imports) and name not in self.locals and name not in self.local_imports
                and name not in self.mod.imports and name not in self.module_defs and name not in self.mod.module_names
                and name not in _BUILTINS)

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
            return f"{type_of_call(inner)}.{chain[0]}", True, ""
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
        # x.m() -> Type.m; x() -> Type.__call__, unless x is an alias (``fn = self.method``: typed and aliased)
        if len(chain) <= 1 and func.id in self.types and (chain or func.id not in self.aliases):
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
                  and dotted_name(expr.func) in ("cast", "typing.cast", "t.cast") and self.resolve(expr.func)[0] in _CASTS):
                expr = expr.args[1]  # typing.cast(T, v) is v
            else:
                return expr, converted

    def _is_builtin(self, name: str) -> bool:
        return not (name in self.locals or name in self.local_imports or name in self.mod.imports or name in self.module_defs
                    or name in self.mod.global_types or name in self.mod.global_values)

    # scanning --------------------------------------------------------------------------------
    def scan(self, body: list[ast.stmt]) -> None:
        order = self.order
        if order is None:
            for stmt in body:
                self._stmt(stmt)
            return
        order.enter(body)
        for stmt in body:
            order.before(stmt)
            self._stmt(stmt)
            order.after(stmt)
        order.exit(body)

    def _kill(self, names: Iterable[str]) -> None:
        for n in names:
            self.env.pop(n, None)
            self.types.pop(n, None)
            self.aliases.pop(n, None)
            self.item_types.pop(n, None)

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
            nested = BodyScanner(self.mod, s, f"{self.qualname}.<locals>.{s.name}", self.class_name, self.module_defs,
                                  self.guess, self.attr_types, enclosing=self)
            nested.scan(s.body)  # its own body, its own straight line
            return
        if isinstance(s, ast.ClassDef):
            self._kill([s.name])
            return
        if isinstance(s, (ast.Import, ast.ImportFrom)):
            before = dict(self.local_imports)
            bind_import(s, self.mod.module, self.mod.is_package, self.local_imports)
            self._kill(k for k in self.local_imports if before.get(k) != self.local_imports[k])
            return
        if isinstance(s, ast.If) and (narrowed := self._isinstance_test(s.test)) is not None:
            self._expr(s.test)
            name, typed, holds = narrowed
            if holds:  # ``if isinstance(x, Foo): x.m()``: a Foo in the body
                before = self.types.get(name)
                self.types[name] = typed
                self.scan(s.body)
                if self.types.get(name) == typed:  # not rebound there: the narrowing ends with the body
                    self._restore_type(name, before)
                self.scan(s.orelse)
            else:
                self.scan(s.body)
                self.scan(s.orelse)
                if not s.orelse and s.body and isinstance(s.body[-1], _BODY_EXITS):  # ``if not isinstance(x, Foo): raise``
                    self.types[name] = typed
        elif isinstance(s, (ast.If, ast.While)):
            self._expr(s.test)
            self.scan(s.body)
            self.scan(s.orelse)
        elif isinstance(s, (ast.For, ast.AsyncFor)):
            self._expr(s.iter)
            self._kill(store_names(s.target))
            self._loop_items(s.target, s.iter)
            self.scan(s.body)
            self.scan(s.orelse)
        elif isinstance(s, (ast.With, ast.AsyncWith)):
            for item in s.items:
                self._expr(item.context_expr)
                if item.optional_vars is not None:
                    self._kill(store_names(item.optional_vars))
                    value = unwrap(item.context_expr)
                    if isinstance(item.optional_vars, ast.Name) and isinstance(value, ast.Call):
                        callee = self.resolve(value.func)[0]  # ``with Foo() as x``: x is what Foo.__enter__ returns
                        if callee:
                            enter = "__aenter__" if isinstance(s, ast.AsyncWith) else "__enter__"
                            self.types[item.optional_vars.id] = f"{type_of_call(callee)}.{enter}()"
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
                self._kill(store_names(case.pattern))
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
                item = self._item_annotation_type(s.annotation)
                if item:
                    self.item_types[s.target.id] = item
        elif isinstance(s, ast.AugAssign):
            self._expr(s.value)
            self._kill(store_names(s.target))
        elif isinstance(s, ast.Delete):
            for t in s.targets:
                self._kill(store_names(t))
        else:  # Expr, Return, Raise, Assert, ...: calls only
            for child in child_nodes(s):
                self._expr(child)
            if isinstance(s, ast.Assert) and (narrowed := self._isinstance_test(s.test)) is not None and narrowed[2]:
                self.types[narrowed[0]] = narrowed[1]  # ``assert isinstance(x, Foo)``: a Foo from here on

    def _isinstance_test(self, test: ast.expr) -> tuple[str, str, bool] | None:
        """``isinstance(x, Foo)`` / ``not isinstance(x, Foo)`` of a local ``x`` of no known type and one class ``Foo`` named
        through the module's imports or definitions: (x, Foo's type string, whether the test holds when true);
        None for anything else (a tuple of classes, an attribute, ``and``/``or``)."""
        holds = True
        while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            test, holds = test.operand, not holds
        if not (isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "isinstance"
                and len(test.args) == 2 and not test.keywords and isinstance(test.args[0], ast.Name)
                and test.args[0].id in self.locals and test.args[0].id not in self.types  # a known type stays
                and isinstance(test.args[1], (ast.Name, ast.Attribute))
                and self._is_builtin("isinstance")):
            return None
        dotted = dotted_name(test.args[1])
        if dotted is None or dotted.split(".", 1)[0] in self.locals:
            return None
        typed = self._resolve_global(dotted)
        return (test.args[0].id, typed, holds) if typed else None

    def _restore_type(self, name: str, before: str | None) -> None:
        if before is None:
            self.types.pop(name, None)
        else:
            self.types[name] = before

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
                    self.types[name] = type_of_call(callee)
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
                self._alias(name, value)  # ``fn = self.method; fn()``
                typed = self._attribute_type(value)
                if typed is not None:  # ``conn = self.conn; conn.send()``
                    self.types[name] = typed
        elif isinstance(target, (ast.Tuple, ast.List)):
            names = list(store_names(target))
            self._kill(names)
            if isinstance(value, ast.Call):
                flat = all(isinstance(e, ast.Name) for e in target.elts)  # a, b = f(): element i is known
                for i, name in enumerate(names):
                    self.env[name] = (value, i, len(names)) if flat else (value, None, 0)
                callee = self.resolve(value.func)[0] if flat and not converted else None
                if callee is not None and type_of_call(callee).endswith("()"):
                    for i, name in enumerate(names):  # ``fig, ax = subplots()`` annotated ``-> tuple[Figure, Axes]``
                        self.types[name] = f"{callee}().{tuple_item(i, len(names))}"
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
        (``unpack`` -1; the resolve phase keeps it only when f is known to give items), of the items' type
        when known (:meth:`_item_type`; not through ``str(..)`` and the like: other items)."""
        inner, converted = self._through(iterable)
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
        typed = None if converted else self._item_type(inner)
        if typed is not None:
            self.types[target.id] = typed

    def _item_type(self, iterable: ast.expr) -> str | None:
        """Type string of the items of ``iterable``: ``for x in xs`` with ``xs: list[Foo]`` (a parameter or a
        local so annotated) gives Foos; ``for x in f(...)`` / ``xs = f(...); for x in xs``, what the items
        of ``f``'s return annotation are (``-> Iterator[Foo]``), looked up in the parent."""
        if isinstance(iterable, ast.Name):
            if iterable.id in self.item_types:
                return self.item_types[iterable.id]
            typed = self.types.get(iterable.id)
            return f"{typed}.{EACH_ITEM}" if typed is not None and typed.endswith("()") else None
        if isinstance(iterable, ast.Call):
            callee = self.resolve(iterable.func)[0]
            called = callee is not None and type_of_call(callee).endswith("()")  # iterating a class's instance: unknown
            return f"{callee}().{EACH_ITEM}" if called else None
        return None

    def _attribute_type(self, value: ast.Attribute) -> str | None:
        """Type string of ``self.a`` / ``x.a`` read into a local, as ``self.a.m()`` / ``x.a.m()`` would resolve
        it: the class's agreed type of ``a``, or the type of attribute ``a`` of what ``x`` (or a base class
        binding ``a``) is, looked up in the parent; None when ``a`` is bound in the class with no one type."""
        owner = value.value
        if not isinstance(owner, ast.Name):
            return None
        if owner.id == self.self_name and self.binding == "instance" and self.class_name:
            if value.attr in self.attr_types:
                return self.attr_types[value.attr]
            if self.class_flows is not None and not self.class_flows.attr_bindings.get(value.attr):
                return f"{self.mod.module}.{self.class_name}.<attr>.{value.attr}"
            return None
        if owner.id in self.types:
            return f"{self.types[owner.id]}.<attr>.{value.attr}"
        return None

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
