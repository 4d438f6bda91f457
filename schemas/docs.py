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


@lru_cache(maxsize=1024)  # one per distinct schema; the evaluator's vary with the run's tools
def _validator(schema_json: str) -> jsonschema.protocols.Validator:
    # Keyed by the schema's JSON text: building a validator costs more than one validation.
    schema = json.loads(schema_json)
    return jsonschema.validators.validator_for(schema)(schema)


def validation_errors(instance: Any, schema: dict[str, Any]) -> list[str]:
    """All errors of ``instance`` against ``schema`` as readable strings (empty when valid)."""
    validator = _validator(json.dumps(schema, sort_keys=True))
    errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.path))
    return [f"{'/'.join(map(str, e.path)) or '<root>'}: {e.message}" for e in errors]


def schema_errors(instance: Any, schema_name: str = "api_doc") -> list[str]:
    """Errors against a schema shipped in this package, e.g. ``schema_errors(doc, "api_doc")``."""
    return validation_errors(instance, load_schema(schema_name))


def parse_doc(doc: str | dict[str, Any]) -> dict[str, Any] | None:
    """A doc dict, from itself or its JSON text; None where the text is not a JSON object (free text)."""
    if isinstance(doc, dict):
        return doc
    try:
        parsed = json.loads(doc)
    except json.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


def canonical_doc_json(doc: dict[str, Any]) -> str:
    """The one text form of a doc used in shards, hashes and model input (stable key order)."""
    keep = {k: doc[k] for k in ("name", "description", "input_params", "output_params")}
    return json.dumps(keep, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def doc_id(doc: dict[str, Any] | str) -> str:
    """Content hash of a doc's canonical JSON: equal docs get equal ids."""
    text = doc if isinstance(doc, str) else canonical_doc_json(doc)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
