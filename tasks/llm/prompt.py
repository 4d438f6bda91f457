"""A versioned prompt: its version goes into the LLM cache key and the dataset manifest, so bump it
whenever the wording changes and cached answers to the old wording are never reused."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Prompt:
    version: str
    system: str
    user_template: str

    def messages(self, **fields: str) -> tuple[tuple[str, str], ...]:
        return (("system", self.system), ("user", self.user_template.format(**fields)))


def schema_text(schema: dict[str, Any]) -> str:
    return json.dumps(schema, separators=(",", ":"))
