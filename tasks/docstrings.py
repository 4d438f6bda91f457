"""API docs built deterministically from a Python function's signature and docstring (no LLM).

The doc has the shape agent 1 writes (schemas/api_doc.schema.json), so mined pairs and LLM pairs
are interchangeable training data. Docstrings in Google, NumPy and reST (Sphinx/Epydoc) style are
read with ``docstring_parser``; what a docstring does not say comes from the signature.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

import docstring_parser

from tasks.schema_rule import PRODUCER_VERBS, identifier_tokens, name_derived_output
from tasks.toolsets import ImportReport, make_doc

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


def _returns_value(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    if node.returns is not None and not (isinstance(node.returns, ast.Constant) and node.returns.value is None):
        return True
    stack: list[ast.AST] = list(node.body)
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Return) and n.value is not None and not (isinstance(n.value, ast.Constant) and n.value.value is None):
            return True
        if isinstance(n, (ast.Yield, ast.YieldFrom)):
            return True
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue  # their returns are not ours
        stack.extend(ast.iter_child_nodes(n))
    return False


def _unparse(node: ast.AST | None) -> str | None:
    if node is None:
        return None
    try:
        return ast.unparse(node)
    except Exception:  # very deep or odd annotations: the docstring type is used instead
        return None


def function_facts(node: ast.FunctionDef | ast.AsyncFunctionDef, qualname: str, in_class: bool) -> FunctionFacts:
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
    return FunctionFacts(
        qualname=qualname,
        docstring=ast.get_docstring(node, clean=True) or "",
        params=tuple(params),
        return_annotation=_unparse(node.returns),
        returns_value=_returns_value(node),
        lineno=node.lineno,
        binding=binding,
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
