"""The errors that stop a whole LLM run (endpoint refused, endpoint down, a stage with no answer),
and the HTTP statuses that are fatal."""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from tasks.llm.structured import StructuredResult

FATAL_STATUSES = {401: "the API key was rejected", 403: "access to this model or endpoint is forbidden", 404: "the endpoint or model does not exist"}


class LLMError(RuntimeError):
    """Base of the errors that stop a whole LLM run (per-item failures are reasons, not errors)."""


class LLMEndpointError(LLMError):
    """401/403/404: the endpoint, key or model is wrong; retrying cannot help, so nothing is retried.
    ``base_url`` and ``detail`` are as recorded: without credentials (see :meth:`StructuredLLM._fatal`)."""

    def __init__(self, status: int, base_url: str, model: str, detail: str):
        self.status, self.base_url, self.model, self.detail = status, base_url, model, detail
        super().__init__(
            f"LLM endpoint answered HTTP {status} ({FATAL_STATUSES.get(status, 'fatal')}) for model {model!r} at "
            f"{base_url}: {detail[:300]}. Check --base-url, --model and OPENAI_API_KEY; nothing was retried."
        )


class LLMUnavailableError(LLMError):
    """``max_consecutive_failures`` requests in a row failed after all their retries: the endpoint is down."""


class LLMStageFailed(LLMError):
    """Every request of a stage failed (see :func:`raise_if_all_failed`)."""


def raise_if_all_failed(results: Sequence[StructuredResult], stage: str = "LLM stage") -> None:
    """Raise :class:`LLMStageFailed` when there were requests and none of them produced an answer."""
    if not results or any(r.ok for r in results):
        return
    reasons = Counter(r.reason for r in results)
    first = next((r.detail for r in results if r.detail), "")
    raise LLMStageFailed(f"{stage}: all {len(results)} requests failed, by reason {dict(reasons.most_common(6))}; first detail: {first[:300]}")
