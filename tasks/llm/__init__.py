"""The request layer: structured JSON calls to any OpenAI-compatible endpoint at scale (docs/llm.md):
client and retries (client), the endpoint config and its secrets (config), the errors that end a run
(errors), the preflight request before a run (preflight), requests and reading their answers (structured), the content-addressed response cache
(cache), rate limits (limits), the HTTP transports (transport), the Batch API (batch), the ledger
(ledger), JSON bytes (codec), and the prompt type (prompt).

Knows nothing of agents or prompts' meaning. May import: schemas/, tasks.common.
"""
