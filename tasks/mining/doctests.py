"""Usage examples in docstrings (``>>>``) as bodies of code: the order a library's own authors show its calls in.

A doctest is code written for the user of an API, so its call order is the order a user is told to follow:
``>>> G = nx.Graph()``, ``>>> G.add_edge(1, 2)``, ``>>> nx.shortest_path(G, 1, 2)``. Each docstring's examples
become one body (:func:`doctest_bodies`), scanned for call orders as a function body is (tasks/mining/order.py).
One difference from code: an expression statement's value is *shown* in a session, so a call whose example
expects output (or an exception) is a read, not a step taken for its effect; such statements are returned in
``shown`` and never count as the earlier call of a pair (``>>> s.upper()`` then ``>>> s.lower()`` is no order).
Patterns read ``doctest:guard`` and so on; where the later call is the very function whose docstring shows the
example (``b.solve_for_reaction_loads(...)`` then ``b.plot_shear_stress()`` in ``plot_shear_stress``'s docstring),
``doctest_usage:same_receiver`` and so on: its docs state the order, so mine-tdi keeps it at support 1.
Their data flows are not read here: the data-flow corpus stays the code's own.
"""
from __future__ import annotations

import ast
import doctest
from collections.abc import Iterator
from typing import NamedTuple

from tasks.mining.syntax import top_level_statements

DOCTEST_SUFFIX = "<doctest>"  # qualname of a docstring's examples: ``Graph.add_edge.<doctest>``
DOCTEST_PREFIX = "doctest:"  # the call-order patterns seen in examples: ``doctest:same_receiver``
# the consumer is the function whose docstring shows the example: its own usage, an order its docs state
DOCTEST_USAGE = "doctest_usage"
_PARSER = doctest.DocTestParser()


class DoctestBody(NamedTuple):
    qualname: str
    body: list[ast.stmt]
    shown: frozenset[int]  # id() of the expression statements whose value the example shows
    function: str | None  # the function or method whose docstring it is (not a class's or the module's)


def _docstring_owners(tree: ast.Module) -> Iterator[tuple[str, ast.AST]]:
    """The module, its top-level functions and classes, and the classes' methods, with their qualnames."""
    yield "", tree
    for node in top_level_statements(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node
        elif isinstance(node, ast.ClassDef):
            yield node.name, node
            for child in top_level_statements(node.body):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield f"{node.name}.{child.name}", child


def examples_body(docstring: str, first_line: int) -> tuple[list[ast.stmt], frozenset[int]]:
    """A docstring's examples as statements (line numbers in the file, near enough for record ids), and the
    expression statements whose value is shown. Examples that do not parse (Python 2, shell sessions) are skipped."""
    try:
        examples = _PARSER.get_examples(docstring)
    except ValueError:  # inconsistent indentation inside the docstring
        return [], frozenset()
    body: list[ast.stmt] = []
    shown: set[int] = set()
    for ex in examples:
        try:
            tree = ast.parse(ex.source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        ast.increment_lineno(tree, first_line + ex.lineno)
        if tree.body and isinstance(tree.body[-1], ast.Expr) and (ex.want.strip() or ex.exc_msg):
            shown.add(id(tree.body[-1]))  # the session prints the last expression's value
        body.extend(tree.body)
    return body, frozenset(shown)


def doctest_bodies(tree: ast.Module) -> list[DoctestBody]:
    """One body per docstring with examples in this module."""
    out: list[DoctestBody] = []
    for qualname, node in _docstring_owners(tree):
        function = qualname if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
        body_nodes = getattr(node, "body", None)
        if not body_nodes or not isinstance(body_nodes[0], ast.Expr):
            continue
        value = body_nodes[0].value
        if not (isinstance(value, ast.Constant) and isinstance(value.value, str) and ">>>" in value.value):
            continue
        body, shown = examples_body(value.value, value.lineno - 1)
        if body:
            name = f"{qualname}.{DOCTEST_SUFFIX}" if qualname else DOCTEST_SUFFIX
            out.append(DoctestBody(name, body, shown, function))
    return out
