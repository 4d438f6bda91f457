"""The import graph keeps the layer order of docs/architecture.md and has no cycles.

Every module's imports are read with ``ast`` (module level and inside functions alike: a lazy import is
still a dependency), resolved to project modules, and checked two ways:
  * layers: a module imports only modules of its own layer or a lower one (a stage package of tasks/
    never imports a later stage; models/ never imports tasks/; nothing below flows/ imports flows/);
  * cycles: no strongly connected component of more than one module, and no module imports itself.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

# Lowest first; the single source of truth is the "Layer order" list in docs/architecture.md, which this
# test reads (so the document and the check cannot drift apart).
ARCHITECTURE = REPO_ROOT / "docs" / "architecture.md"
TOP_LEVEL = ("schemas", "models", "tasks", "warehouse", "flows", "bench")


def layer_order() -> list[str]:
    """The numbered list under "## Layer order": ``1. `schemas` ...`` -> ["schemas", ...]."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text.split("## Layer order", 1)[1].split("\n## ", 1)[0]
    layers = re.findall(r"^\d+\.\s+`([\w.]+)`", section, flags=re.M)
    assert layers, f"no numbered layer list under '## Layer order' in {ARCHITECTURE}"
    return layers


def project_modules() -> dict[str, Path]:
    modules = {}
    for top in TOP_LEVEL:
        for path in sorted((REPO_ROOT / top).rglob("*.py")):
            parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """Project modules ``module`` imports: ``from a.b import c`` counts as ``a.b.c`` when that is a
    module, else ``a.b``; relative imports are resolved against the package."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:  # import a.b.c where a.b.c is an attribute: the module a.b
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


def layer_of(module: str, layers: list[str]) -> int:
    """Index of the longest layer prefix of ``module``; package ``__init__`` modules of a layer's parent
    (``tasks``) rank lowest, they hold docstrings only."""
    best = None
    for i, layer in enumerate(layers):
        if module == layer or module.startswith(layer + "."):
            if best is None or len(layer) > len(layers[best]):
                best = i
    if best is None:
        raise AssertionError(f"module {module} is in no layer of docs/architecture.md's layer order")
    return best


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = project_modules()
    known = set(modules)
    return {m: imports_of(m, p, known) for m, p in modules.items() if m not in TOP_LEVEL and m != "tasks"}


def test_every_module_is_in_a_layer(graph):
    layers = layer_order()
    for module in graph:
        layer_of(module, layers)


def test_imports_go_down_the_layers(graph):
    layers = layer_order()
    upward = sorted(f"{m} ({layers[layer_of(m, layers)]}) imports {d} ({layers[layer_of(d, layers)]})"
                    for m, deps in graph.items() for d in deps
                    if d not in TOP_LEVEL and d != "tasks" and layer_of(d, layers) > layer_of(m, layers))
    assert not upward, "imports against the layer order of docs/architecture.md:\n" + "\n".join(upward)


def test_flows_do_not_import_each_other(graph):
    crossing = sorted(f"{m} imports {d}" for m, deps in graph.items() if m.startswith("flows.")
                      for d in deps if d.startswith("flows."))
    assert not crossing, "a flow imports another flow (move the shared part into tasks/):\n" + "\n".join(crossing)


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    cycles: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(sorted(graph[root])))]
        while work:
            node, children = work[-1]
            for child in children:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        cycles.append(sorted(component))
    return cycles


def closure(graph: dict[str, set[str]], roots: set[str]) -> set[str]:
    seen, todo = set(), list(roots)
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(graph.get(m, ()))
    return seen


def test_no_import_cycles(graph):
    cycles = find_cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_mining_and_the_dataset_stage_need_no_llm(graph):
    """mine-tdi is "no LLM": its parsing, docs, balance, shards, gate and publish never load the LLM
    layer or the agents (only the optional review, ``tasks.mining.review``, does)."""
    roots = {m for m in graph if m.startswith(("tasks.dataset", "tasks.mining")) and m != "tasks.mining.review"}
    leaked = sorted(m for m in closure(graph, roots) if m.startswith(("tasks.llm", "tasks.agents")))
    assert not leaked, f"the no-LLM path imports {leaked}"


def test_the_checker_sees_a_cycle_and_an_upward_import(tmp_path):
    """The checks above would pass on an empty graph; show they catch what they are for."""
    a = tmp_path / "a.py"
    a.write_text("from tasks.gtool.links import x\nimport models.discriminator\n")
    deps = imports_of("tasks.common.cli", a, {"tasks.gtool.links", "models.discriminator", "tasks.common.cli"})
    assert deps == {"tasks.gtool.links", "models.discriminator"}
    layers = layer_order()
    assert layer_of("tasks.gtool.links", layers) > layer_of("tasks.common.cli", layers)
    assert layer_of("models.discriminator", layers) < layer_of("tasks.common.cli", layers)
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_package_inits_hold_only_a_docstring():
    """A package's ``__init__.py`` says what the package owns; names are imported from the module that
    owns them, so there is no second address (facade) for any of them."""
    offenders = []
    for top in TOP_LEVEL:
        for init in sorted((REPO_ROOT / top).rglob("__init__.py")):
            body = ast.parse(init.read_text(encoding="utf-8")).body
            code = [n for n in body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))
                    and not (isinstance(n, ast.ImportFrom) and n.module == "__future__")]
            if code:
                offenders.append(f"{init.relative_to(REPO_ROOT)}:{code[0].lineno}")
    assert not offenders, "package __init__.py with code (import from the owning module instead): " + ", ".join(offenders)


def test_mine_tdi_loads_no_llm_client():
    """mine-tdi without its optional review never loads the LLM client (nor the OpenAI SDK)."""
    import subprocess
    import sys

    probe = ("import sys, flows.mine_tdi; "
             "print(sorted(m for m in sys.modules if m == 'openai' or m.startswith(('openai.', 'tasks.llm.client'))))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
