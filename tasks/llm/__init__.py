"""The request layer: structured JSON calls to any OpenAI-compatible endpoint at scale (docs/llm.md):
client and retries, the content-addressed response cache, rate limits, the Batch API and the ledger.

Knows nothing of agents or prompts' meaning. May import: schemas/, tasks.common.
"""
