"""Tool API documents: JSON schema, validation and the canonical text form."""
from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from importlib import resources
from typing import Any

import jsonschema


@lru_cache(maxsize=None)
def load_schema(name: str) -> dict[str, Any]:
    """Load a JSON schema shipped in this package, e.g. ``load_schema("api_doc")``."""
    return json.loads(resources.files("schemas").joinpath(f"{name}.schema.json").read_text())


@lru_cache(maxsize=None)
def _validator(name: str) -> jsonschema.protocols.Validator:
    schema = load_schema(name)
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema)


def schema_errors(instance: Any, schema_name: str = "api_doc") -> list[str]:
    """All validation errors as readable strings (empty when valid)."""
    errors = sorted(_validator(schema_name).iter_errors(instance), key=lambda e: list(e.path))
    return [f"{'/'.join(map(str, e.path)) or '<root>'}: {e.message}" for e in errors]


def canonical_doc_json(doc: dict[str, Any]) -> str:
    """The one text form of a doc used in shards, hashes and model input (stable key order)."""
    keep = {k: doc[k] for k in ("name", "description", "input_params", "output_params")}
    return json.dumps(keep, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def doc_id(doc: dict[str, Any] | str) -> str:
    """Content hash of a doc's canonical JSON: equal docs get equal ids."""
    text = doc if isinstance(doc, str) else canonical_doc_json(doc)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
