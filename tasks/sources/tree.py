"""Reader of local Python trees and of the running interpreter's standard library: every function and
method definition (parsed with :mod:`ast`) is a candidate; a file that cannot be read, decoded or
parsed is one rejection. Also the CodeSearchNet-style token lists of Python code."""
from __future__ import annotations

import ast
import hashlib
import io
import os
import re
import sys
import textwrap
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from tasks.sources.records import Candidate, FunctionRecord, Reason, excerpt, failed, file_or_broken_link
from tasks.sources.spec import DEFAULT_TREE_EXCLUDES, STDLIB_EXCLUDES, SourceConfigError, SourceSpec, stdlib_root


def tree_settings(spec: SourceSpec) -> tuple[Path, str, tuple[str, ...]]:
    root = stdlib_root(spec) if spec.kind == "stdlib" else Path(spec.path)  # type: ignore[arg-type]
    if not root.is_dir():  # checked before resolve(), which raises on a symlink loop
        raise SourceConfigError(f"source tree {root} is not a directory")
    if spec.kind == "stdlib":
        repo = spec.repo_name or f"cpython-stdlib-{sys.version_info.major}.{sys.version_info.minor}"
        excludes = STDLIB_EXCLUDES if spec.exclude_dirs is None else spec.exclude_dirs
    else:
        repo = spec.repo_name or root.resolve().name
        excludes = DEFAULT_TREE_EXCLUDES if spec.exclude_dirs is None else spec.exclude_dirs
    return root, repo, tuple(excludes)


def tree_files(root: Path, excludes: tuple[str, ...]) -> list[tuple[Path, str]]:
    """``*.py`` files under ``root`` sorted by relative path, not descending into excluded dirs."""
    skip = set(excludes)
    out = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in skip]
        for name in names:
            if name.endswith(".py"):
                file = Path(folder, name)
                if file_or_broken_link(file):
                    out.append((file, file.relative_to(root).as_posix()))
    return sorted(out, key=lambda item: item[1])


@dataclass(frozen=True)
class _ParsedFile:
    file: Path
    rel: str
    repo: str
    lines: list[str]  # split like the parser does (\r\n, \r, \n), line ends kept
    sha: str


_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


def _source_segment(lines: list[str], node: ast.AST) -> str:
    """``ast.get_source_segment(..., padded=True)`` over pre-split lines (the stdlib function
    re-splits the whole file on every call, quadratic on large modules)."""
    start, end = node.lineno - 1, node.end_lineno - 1  # type: ignore[attr-defined]
    col, end_col = node.col_offset, node.end_col_offset  # type: ignore[attr-defined]
    first = lines[start].encode("utf-8")
    if start == end:
        return first[col:end_col].decode("utf-8")
    padding = " " * len(first[:col].decode("utf-8"))
    last = lines[end].encode("utf-8")[:end_col].decode("utf-8")
    return padding + first[col:].decode("utf-8") + "".join(lines[start + 1:end]) + last


def _functions_in_order(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function/method in source order with its qualified name (``Class.method``,
    ``outer.<locals>.inner`` as in ``__qualname__``)."""

    def visit(body: list[ast.stmt], prefix: str) -> Iterator[tuple[str, Any]]:
        for node in body:
            for child in _nested_statements(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    qualname = prefix + child.name
                    yield qualname, child
                    yield from visit(child.body, qualname + ".<locals>.")
                elif isinstance(child, ast.ClassDef):
                    yield from visit(child.body, prefix + child.name + ".")

    yield from visit(tree.body, "")


def _nested_statements(node: ast.stmt) -> Iterator[ast.stmt]:
    """The statement itself, or for compound statements (if/try/with/for/while/match) the
    definitions inside them, so conditionally defined functions are found too."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        yield node
        return
    for name in ("body", "orelse", "finalbody", "handlers", "cases"):
        for child in getattr(node, name, None) or []:
            if isinstance(child, ast.stmt):
                yield from _nested_statements(child)
            else:  # ExceptHandler, match_case
                for stmt in getattr(child, "body", []):
                    yield from _nested_statements(stmt)


_SKIP_TOKENS = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                tokenize.ENDMARKER, tokenize.ENCODING}


def python_code_tokens(code: str, skip_docstring: bool = False) -> list[str] | None:
    """Significant tokens of Python code (names, ops, literals; no comments/whitespace), as
    CodeSearchNet's ``code_tokens``. ``skip_docstring`` drops the string literal(s) that open the
    body of the (first) def. ``None`` when the code does not tokenize."""
    tokens: list[str] = []
    depth = 0
    state = "header"  # header -> body_start (after the def's ':') -> body
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type in _SKIP_TOKENS:
                continue
            if state == "body_start":
                if skip_docstring and tok.type == tokenize.STRING:
                    continue
                state = "body"
            if state == "header" and tok.type == tokenize.OP:
                if tok.string in "([{":
                    depth += 1
                elif tok.string in ")]}":
                    depth -= 1
                elif tok.string == ":" and depth == 0 and "def" in tokens:
                    state = "body_start"
            tokens.append(tok.string)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    return tokens


_WORD_OR_PUNCT = re.compile(r"\w+|[^\w\s]")


def docstring_tokens(docstring: str) -> list[str]:
    """CodeSearchNet-style summary tokens: words and punctuation of the first paragraph."""
    summary = re.split(r"\n\s*\n", docstring.strip(), maxsplit=1)[0]
    return _WORD_OR_PUNCT.findall(summary)


def _record_from_function(parsed: _ParsedFile, qualname: str, node: ast.AST) -> FunctionRecord:
    code = textwrap.dedent(_source_segment(parsed.lines, node))
    doc = ast.get_docstring(node, clean=True) or ""  # type: ignore[arg-type]
    start, end = node.lineno, node.end_lineno  # type: ignore[attr-defined]
    return FunctionRecord(
        repo=parsed.repo, path=parsed.rel, func_name=qualname, original_string=code, language="python",
        code=code, code_tokens=[], docstring=doc,  # code_tokens: filled by with_code_tokens
        docstring_tokens=docstring_tokens(doc), sha=parsed.sha,
        url=f"{parsed.file.resolve().as_uri()}#L{start}-L{end}", partition="train")


def with_code_tokens(rec: FunctionRecord) -> FunctionRecord:
    tokens = python_code_tokens(rec.code, skip_docstring=True)
    return replace(rec, code_tokens=tokens if tokens is not None else rec.code.split())


def file_candidates(file: Path, rel: str, repo: str) -> list[Candidate]:
    """All candidates of one source file: its functions, or one rejection for the whole file."""
    locator, file_id = rel, f"{repo}:{rel}"
    try:
        data = file.read_bytes()
    except OSError as exc:
        return [failed(locator, file_id, Reason.UNREADABLE_FILE, f"{type(exc).__name__}: {exc}")]
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        source = data.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError) as exc:
        return [failed(locator, file_id, Reason.BAD_ENCODING, f"{type(exc).__name__}: {exc}",
                        excerpt(data))]
    try:
        tree = ast.parse(source, filename=str(file))
    except (SyntaxError, ValueError) as exc:  # ValueError: null bytes in source
        where = f" (line {exc.lineno})" if isinstance(exc, SyntaxError) and exc.lineno else ""
        return [failed(locator, file_id, Reason.SYNTAX_ERROR, f"{type(exc).__name__}{where}: {exc}",
                        excerpt(source))]
    parsed = _ParsedFile(file, rel, repo, _LINE.findall(source), hashlib.sha1(data).hexdigest())
    out, seen = [], set()
    for qualname, node in _functions_in_order(tree):
        # a property's getter and setter, or one name defined in both branches of an `if`, share a
        # qualname: the later ones get their line, so every record id is unique
        name = qualname if qualname not in seen else f"{qualname}@L{node.lineno}"
        seen.add(qualname)
        out.append(Candidate(f"{rel}::{name}", partial(_record_from_function, parsed, name, node),
                             f"{repo}:{rel}:{name}", with_code_tokens))
    return out


def tree_candidates(spec: SourceSpec) -> Iterator[Candidate]:
    root, repo, excludes = tree_settings(spec)
    for file, rel in tree_files(root, excludes):
        yield from file_candidates(file, rel, repo)
