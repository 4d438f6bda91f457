"""The llama-cpp-python fallback's ``response_format`` translation (standard OpenAI form ->
llama-cpp-python's native form), as functions and as an ASGI wrapper of the app."""
from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any


def translate_response_format(response_format: Any) -> Any:
    """``{"type":"json_schema","json_schema":{"schema":S,...}}`` -> ``{"type":"json_object",
    "schema":S}``; anything else is returned unchanged. ``name``/``strict`` have no native
    counterpart: the grammar built from S constrains every token anyway."""
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        return response_format
    spec = response_format.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    if schema is None:
        return {"type": "json_object"}
    return {"type": "json_object", "schema": schema}


def translate_chat_request_body(body: bytes) -> bytes:
    """Rewrite the ``response_format`` of a chat completion request body; bodies that are not
    a JSON object, or need no change, pass through byte for byte (the app reports errors)."""
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, ValueError):
        return body
    if not isinstance(payload, dict) or "response_format" not in payload:
        return body
    translated = translate_response_format(payload["response_format"])
    if translated is payload["response_format"]:
        return body
    payload["response_format"] = translated
    return json.dumps(payload).encode()


Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class ResponseFormatTranslator:
    """ASGI wrapper: buffers POST ``.../chat/completions`` bodies and translates their
    ``response_format``; every other request (and the lifespan) goes straight through."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope.get("method") != "POST"
            or not scope.get("path", "").rstrip("/").endswith("/chat/completions")
        ):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = translate_chat_request_body(b"".join(chunks))
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # later calls wait for the client's disconnect

        await self.app(dict(scope, headers=headers), replay, send)

