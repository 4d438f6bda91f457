"""Where each named benchmark comes from (source, pinned commit, license), and the check that every tool set a
flow names is on disk before any work starts: a missing one is one line saying how to get it (no download)."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class BenchmarkSource:
    title: str
    source: str  # public repository @ the commit the shared copy was made from
    license: str


# ../shared/data/README.md, table of benchmarks (kept in step by tests/test_hostile_inputs_flows.py)
BENCHMARK_SOURCES: dict[str, BenchmarkSource] = {
    "apibank": BenchmarkSource("API-Bank", "https://github.com/AlibabaResearch/DAMO-ConvAI @1d76900 (api-bank)",
                               "Apache-2.0"),
    "toolbench_stable": BenchmarkSource("StableToolBench (solvable test queries)",
                                        "https://github.com/THUNLP-MT/StableToolBench @aa4ed9f", "Apache-2.0"),
    "ultratool": BenchmarkSource("UltraTool (TaskBench format)", "https://github.com/WxxShirley/GNN4TaskPlan @f148669",
                                 "MIT"),
    "tmdb": BenchmarkSource("RestBench-TMDB", "https://github.com/WxxShirley/GNN4TaskPlan @f148669", "MIT"),
    "nestools": BenchmarkSource("NesTools (test set)",
                                "https://github.com/hhan1018/NesTools @fb617f3 (data/test_data.jsonl)", "Apache-2.0"),
}
TOOLS_FILE = "tools.jsonl"  # both folder layouts (docs/toolsets.md) have it
# an agent's tool definitions, or an OpenAPI description (tasks/toolsets/tool_specs.py, tasks/toolsets/openapi.py)
TOOL_SPEC_SUFFIXES = (".json", ".jsonl", ".yaml", ".yml")


def tool_spec_problem(path: Path, flag: str) -> str | None:
    """Why the file of tool definitions ``path`` cannot be read, or None: the whole file is read (it is small, and
    a bad entry found after hours of work would waste them)."""
    from tasks.toolsets.doc_import import ToolSetFormatError
    from tasks.toolsets.tool_specs import read_tool_specs

    try:
        read_tool_specs(path)
    except OSError as err:  # unreadable: permissions, a folder where a file was
        return f"{flag} {path}: cannot be read ({err.strerror or err})"
    except ToolSetFormatError as err:
        return f"{flag} {path}: {err}"
    return None


def missing_benchmark(name: str, folder: Path, flag: str = "", root_flag: str = "") -> str:
    """One line: benchmark ``name`` is not at ``folder``, and how to get it there."""
    src = BENCHMARK_SOURCES[name]
    where = f"{flag} {name}" if flag else name
    instead = f"pass {root_flag} DIR or a tool set folder" if root_flag else "name a tool set folder"
    return (f"{where}: no benchmark folder {folder}; get {src.title} from {src.source} ({src.license}) into that "
            f"folder in the layout of docs/toolsets.md, or {instead}")


def is_tool_spec_file(path: str | Path) -> bool:
    """Whether ``path`` is a file of an agent's tool definitions by its name: a .json, .jsonl, .yaml or .yml file,
    except a folder layout's own ``tools.jsonl``."""
    path = Path(path)
    return path.is_file() and path.suffix.lower() in TOOL_SPEC_SUFFIXES and path.name != TOOLS_FILE


def toolset_problem(spec: str, data_root: str | Path, flag: str, fall_back_to_folder: bool = True,
                    root_flag: str = "", tool_specs: bool = True) -> str | None:
    """Why the tool set ``spec`` (a benchmark name under ``data_root``, a folder, or with ``tool_specs`` a file of
    tool definitions) cannot be read, or None. ``fall_back_to_folder``: a benchmark name missing under
    ``data_root`` may still be a folder of that name (as ``tasks.toolsets.readers.load_toolset_spec`` reads it)."""
    benchmark = spec in BENCHMARK_SOURCES
    if benchmark and (Path(data_root) / spec).is_dir():
        folder = Path(data_root) / spec
    elif (not benchmark or fall_back_to_folder) and Path(spec).is_dir():
        folder = Path(spec)
    elif benchmark:
        return missing_benchmark(spec, Path(data_root) / spec, flag, root_flag)
    elif Path(spec).is_file() and Path(spec).name == TOOLS_FILE:
        return f"{flag} {spec}: a file, not a tool set folder; pass the folder that holds it ({Path(spec).parent})"
    elif tool_specs and is_tool_spec_file(spec):
        return tool_spec_problem(Path(spec), flag)
    elif Path(spec).exists():
        kinds = f"nor a file of tool definitions ({', '.join(TOOL_SPEC_SUFFIXES)}; " if tool_specs else "("
        return f"{flag} {spec}: a file, but neither a tool set folder {kinds}docs/toolsets.md)"
    else:
        return (f"{flag} {spec!r}: neither a benchmark ({', '.join(BENCHMARK_SOURCES)}) nor an existing tool set "
                "folder" + (" or file of tool definitions" if tool_specs else ""))
    if not (folder / TOOLS_FILE).is_file():
        return f"{flag} {spec}: {folder} has no {TOOLS_FILE} (not a tool set folder, docs/toolsets.md)"
    return None


def check_toolsets(specs: Iterable[str], data_root: str | Path, flag: str, fall_back_to_folder: bool = True,
                   root_flag: str = "", tool_specs: bool = True) -> None:
    """A ``ValueError`` naming every tool set of ``specs`` that cannot be read (one line each, ';'-joined);
    ``root_flag`` is the flag that moves ``data_root`` (said in a missing benchmark's line); ``tool_specs``: a file
    of tool definitions is a tool set (build-graph), or not (a set with gold edges is asked for)."""
    problems = [p for s in dict.fromkeys(specs)
                if (p := toolset_problem(s, data_root, flag, fall_back_to_folder, root_flag, tool_specs))]
    if problems:
        raise ValueError("; ".join(problems))


def dataset_name(spec: str, data_root: str | Path) -> str:
    """The dataset name the tool set ``spec`` gets (as ``tasks.toolsets.readers.load_toolset_spec`` names it): a
    benchmark's name, a folder's, or a file's stem."""
    if spec in BENCHMARK_SOURCES and (Path(data_root) / spec).is_dir():
        return spec
    path = Path(spec)
    return path.stem if path.is_file() else (path.name or path.resolve().name)


def check_dataset_names(specs: Iterable[str], data_root: str | Path, flag: str) -> None:
    """A ``ValueError`` when two of ``specs`` would be one dataset of the warehouse (two folders or files of one
    name): said before any work, not when the warehouse is written."""
    by_name: dict[str, list[str]] = {}
    for spec in dict.fromkeys(specs):
        by_name.setdefault(dataset_name(spec, data_root), []).append(spec)
    clashes = [f"{flag} {', '.join(specs)}: all would be dataset {name!r} (a tool set is named after its "
               "benchmark, folder or file); rename all but one" for name, specs in by_name.items() if len(specs) > 1]
    if clashes:
        raise ValueError("; ".join(clashes))
