"""Name resolution: a module's import table (:func:`bind_import`), the type string of a call's value and, in
the parent, qualified names -> functions across every module read (:class:`SymbolTable`), following
re-exports through package ``__init__`` import tables, star imports and class bases."""
from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from tasks.mining.docs import FunctionFacts
from tasks.mining.facts import ModuleFacts
from tasks.mining.reasons import MineReason
from tasks.mining.syntax import annotated_class, annotation_class, annotation_item_class, dotted_name


MAX_REEXPORT_HOPS = 4
MAX_DOC_BASE_HOPS = 6  # classes up a chain of undocumented overrides
MAX_STAR_SOURCES = 16  # star imports fan out: followed MAX_STAR_DEPTH hops deep, this many modules each
MAX_STAR_DEPTH = 3


def import_base(module: str, is_package: bool, level: int) -> str | None:
    parts = module.split(".") if is_package else module.split(".")[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)] if len(parts) >= level - 1 else None
    return ".".join(parts) if parts is not None else None


def bind_import(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, table: dict[str, str]) -> None:
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.asname:
                table[alias.asname] = alias.name
            else:
                top = alias.name.split(".")[0]
                table[top] = top
        return
    if node.level:
        base = import_base(module, is_package, node.level)
        if base is None:
            return
        source = ".".join(p for p in (base, node.module or "") if p)
    else:
        source = node.module or ""
    for alias in node.names:
        if alias.name != "*" and source:
            table[alias.asname or alias.name] = f"{source}.{alias.name}"


def _looks_like_class(qualified: str) -> bool:
    last = qualified.rsplit(".", 1)[-1]
    return last[:1].isupper() and not last.isupper()


def type_of_call(callee: str) -> str:
    """Type string of a call's value: the class for ``Foo(...)``, else ``f()`` (what ``f`` returns,
    read from its return annotation, or from its body, when the names are resolved)."""
    return callee if _looks_like_class(callee) else f"{callee}()"


_TUPLE_ITEM = re.compile(r"\.<item(\d+)/(\d+)>")
EACH_ITEM = "<each>"  # the type-string step for an item iterated from a call's value: ``for x in f()`` is ``f().<each>``
_EACH_STEP = f"().{EACH_ITEM}"


def tuple_item(index: int, count: int) -> str:
    """The type-string step for element ``index`` of ``count`` of a call's value (``a, b = f()``):
    ``f().<item0/2>``, resolved by :meth:`SymbolTable.tuple_item_class`."""
    return f"<item{index}/{count}>"


@dataclass(frozen=True)
class Target:
    key: str  # module.qualname
    module: str
    facts: FunctionFacts
    via_instance: bool = False  # a method reached through a module-level instance: its self is bound


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

    def inherit_docstrings(self) -> int:
        """Give an undocumented method that overrides a documented method of its bases that method's docstring,
        as ``inspect.getdoc`` and Sphinx do (``class FileCache(Cache): def get(self, key): ...`` reads as
        ``Cache.get``'s doc). Dunder methods keep their own (``__init__``'s is the class's). Run once, before
        resolving: every target, doc and hard negative then sees it. Returns how many methods inherited."""
        inherited = 0
        for mod in self.modules.values():
            for qual, facts in list(mod.functions.items()):
                cls, _, name = qual.rpartition(".")
                if (facts.documented or cls not in mod.classes or qual in mod.duplicated
                        or (name.startswith("__") and name.endswith("__"))):
                    continue
                found = self._base_docstring(mod.module, cls, name, 0)
                if found is not None:
                    mod.functions[qual] = replace(facts, docstring=found[0], docstring_from=found[1])
                    inherited += 1
        self._cache.clear()  # targets resolved on the way hold the facts of before
        return inherited

    def _base_docstring(self, module: str, cls: str, name: str, depth: int) -> tuple[str, str] | None:
        """(docstring, its method's key) of the first documented ``name`` up the bases of ``cls``, first base first."""
        if depth > MAX_DOC_BASE_HOPS:
            return None
        for base in self.modules[module].bases.get(cls, []):
            target = self.resolve(f"{base}.{name}")[0]
            if target is None:
                continue
            if target.facts.documented:
                return target.facts.docstring, target.facts.docstring_from or target.key
            owner = target.key[len(target.module) + 1:].rpartition(".")[0]  # an undocumented override up there: go on
            if target.module in self.modules and owner in self.modules[target.module].classes:
                found = self._base_docstring(target.module, owner, name, depth + 1)
                if found is not None:
                    return found
        return None

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

    def tuple_item_class(self, callee: str, index: int, count: int, depth: int) -> str | None:
        """Qualified class of element ``index`` of what a call of ``callee`` gives, unpacked into ``count``
        names: from its return annotation ``tuple[A, B]`` (exactly ``count`` items, no ``...``), the one
        class element ``index`` names; else None."""
        if depth > MAX_REEXPORT_HOPS:
            return None
        target = self.resolve(callee, depth + 1)[0]
        text = target.facts.return_annotation if target is not None else None
        if not text or "tuple" not in text.lower():
            return None
        try:
            ann = ast.parse(text.strip(), mode="eval").body
        except (SyntaxError, ValueError, RecursionError):
            return None
        if not (isinstance(ann, ast.Subscript) and (dotted_name(ann.value) or "").rsplit(".", 1)[-1] in ("tuple", "Tuple")
                and isinstance(ann.slice, ast.Tuple) and len(ann.slice.elts) == count
                and not any(isinstance(e, ast.Constant) and e.value is Ellipsis for e in ann.slice.elts)):
            return None
        named = annotated_class(ann.slice.elts[index])
        return self._class_in(target, callee, named) if named is not None else None  # type: ignore[arg-type]

    def item_class(self, callee: str, depth: int) -> str | None:
        """Qualified class of the items iterated from what a call of ``callee`` gives: the one class its return
        annotation's items are (``-> Iterator[Foo]``, ``-> list[Foo]``, ``-> tuple[Foo, ...]``); else None."""
        if depth > MAX_REEXPORT_HOPS:
            return None
        target = self.resolve(callee, depth + 1)[0]
        named = annotation_item_class(target.facts.return_annotation) if target is not None else None
        return self._class_in(target, callee, named) if named is not None else None  # type: ignore[arg-type]

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
        items = list(_TUPLE_ITEM.finditer(name)) if "<item" in name else []
        item = items[-1] if items else None  # the last element step: what comes before it is the call unpacked
        if item is not None and name[item.start() - 2: item.start()] == "()":  # f().<item0/2>.m: m of f's element 0
            cls = self.tuple_item_class(name[: item.start() - 2], int(item.group(1)), int(item.group(2)), depth)
            if cls is None:
                return None, MineReason.UNRESOLVED_TARGET, f"{name}: type of element {item.group(1)} of {name[: item.start()]} unknown"
            return self.resolve(cls + name[item.end():], depth + 1)
        each = name.rfind(_EACH_STEP) if EACH_ITEM in name else -1
        if each >= 0:  # f().<each>.m: m of the items of what f gives, by f's return annotation
            cls = self.item_class(name[:each], depth)
            if cls is None:
                return None, MineReason.UNRESOLVED_TARGET, f"{name}: type of the items of {name[:each]}() unknown"
            return self.resolve(cls + name[each + len(_EACH_STEP):], depth + 1)
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
