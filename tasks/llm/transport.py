"""How a chat request reaches the endpoint: FastHTTPTransport (a keep-alive HTTP/1.1 client on asyncio,
the hot path of online calls) and SDKTransport (the official openai client, for proxies and injected clients)."""
from __future__ import annotations

import asyncio
import os
import re
import ssl
import urllib.parse
import urllib.request
import zlib
from collections.abc import Mapping
from typing import Any

import openai

from tasks.llm.codec import dumps, loads


class Reply:
    __slots__ = ("status", "headers", "data", "text")

    def __init__(self, status: int, headers: Mapping[str, str], data: Any, text: str):
        self.status, self.headers, self.data, self.text = status, headers, data, text


def _ssl_context() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    if not (os.environ.get("SSL_CERT_FILE") or os.environ.get("SSL_CERT_DIR")):
        try:
            import certifi

            ctx.load_verify_locations(certifi.where())
        except ImportError:  # pragma: no cover
            pass
    return ctx


def proxy_applies(base_url: str) -> bool:
    parts = urllib.parse.urlsplit(base_url)
    proxies = urllib.request.getproxies()
    if not (proxies.get(parts.scheme) or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass(parts.hostname or "")


class _Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection: a request is written, its future completes with
    (status, headers, body, keep_alive) once the whole response is in; one wakeup per response."""

    MAX_HEAD = 1 << 16

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiter: asyncio.Future | None = None
        self.head: tuple[int, dict[str, str], bool] | None = None
        self.received = False  # any byte of the current response
        self.closed = False
        self.expires_at = 0.0  # idle connections past this are dropped, not reused

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, message: bytes, loop: asyncio.AbstractEventLoop) -> asyncio.Future:
        self.waiter = loop.create_future()
        self.head, self.received = None, False
        self.buf.clear()
        self.transport.write(message)  # type: ignore[union-attr]
        return self.waiter

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self.received = True
        if self.waiter is not None and not self.waiter.done():
            try:
                self._advance(eof=False)
            except (ValueError, IndexError) as exc:
                self._fail(ConnectionError(f"malformed HTTP response: {exc}"))

    def eof_received(self) -> bool:
        return False  # close our side too; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            try:
                if not self._advance(eof=True):
                    self._fail(ConnectionError(f"connection closed before any byte of the response: {exc or 'EOF'}") if not self.received
                               else ConnectionError(f"connection closed mid-response: {exc or 'EOF'}"))
            except (ValueError, IndexError) as err:
                self._fail(ConnectionError(f"malformed HTTP response: {err}"))

    def _fail(self, exc: BaseException) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc)

    def _advance(self, eof: bool) -> bool:
        """Complete the waiter if the response is whole; True when it did."""
        buf = self.buf
        while self.head is None:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > self.MAX_HEAD:
                    raise ValueError("response head too large")
                return False
            head = _parse_head(bytes(buf[: end + 4]))
            del buf[: end + 4]
            if 100 <= head[0] < 200:
                continue  # an interim response (100 Continue): the real one follows
            self.head = head
        status, headers, keep = self.head
        if "chunked" in headers.get("transfer-encoding", "").lower():
            parsed = _parse_chunked(buf)
            if parsed is None:
                if eof:
                    raise ValueError("truncated chunked body")
                return False
            body = parsed
        elif "content-length" in headers:
            length = int(headers["content-length"])
            if len(buf) < length:
                if eof:
                    raise ValueError(f"body ended after {len(buf)} of {length} bytes")
                return False
            body = bytes(buf[:length])
        elif status in (204, 304):
            body = b""
        else:
            if not eof:
                return False  # the body ends with the connection
            body, keep = bytes(buf), False
        self.waiter.set_result((status, headers, body, keep and not eof))  # type: ignore[union-attr]
        return True


def _parse_chunked(buf: bytearray) -> bytes | None:
    """The body of a complete chunked message in ``buf``, or None while it is incomplete."""
    parts, pos = [], 0
    while True:
        line_end = buf.find(b"\r\n", pos)
        if line_end < 0:
            return None
        size = int(bytes(buf[pos:line_end]).split(b";", 1)[0].strip(), 16)
        pos = line_end + 2
        if size == 0:
            while True:  # optional trailers, then an empty line
                line_end = buf.find(b"\r\n", pos)
                if line_end < 0:
                    return None
                if line_end == pos:
                    return b"".join(parts)
                pos = line_end + 2
        if len(buf) < pos + size + 2:
            return None
        parts.append(bytes(buf[pos : pos + size]))
        pos += size + 2


class FastHTTPTransport:
    """A minimal HTTP/1.1 keep-alive client for JSON POSTs: the hot path of online calls.

    The official SDK costs ~7 ms of CPU per structured call here (request transformation over the
    schema, pydantic models, httpx's pool); this costs ~0.1 ms. It speaks plain HTTP/1.1 with
    Content-Length or chunked bodies (gzip/deflate decoded), over TLS for https; no proxies (the
    SDK transport is used when one applies), no redirects.
    """

    def __init__(self, base_url: str, headers: Mapping[str, str]):
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"unsupported base_url {base_url!r}")
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl = _ssl_context() if parts.scheme == "https" else None
        self._prefix = parts.path.rstrip("/")
        host_header = parts.netloc.rpartition("@")[2]
        all_headers = {"Host": host_header, "Content-Type": "application/json", "Accept": "application/json",
                       "Accept-Encoding": "identity", "Connection": "keep-alive", "User-Agent": "tgr-pipeline-llm/1", **headers}
        self._head = "".join(f"{k}: {v}\r\n" for k, v in all_headers.items()).encode("latin-1")
        self._idle: list[_Connection] = []
        self.connections_opened = 0

    async def _connect(self) -> _Connection:
        self.connections_opened += 1
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(_Connection, self._host, self._port, ssl=self._ssl,
                                               server_hostname=self._host if self._ssl else None)
        return conn

    async def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
        """(status, lower-cased headers, body) of one request on a pooled connection."""
        payload = body or b""
        message = b"%s %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s" % (
            method.encode(), (self._prefix + path).encode("latin-1"), self._head, len(payload), payload)
        loop = asyncio.get_running_loop()
        while True:
            reused = bool(self._idle)
            conn = self._idle.pop() if reused else await self._connect()
            if reused and (conn.closed or loop.time() >= conn.expires_at):
                conn.transport.close()  # type: ignore[union-attr]
                continue
            if conn.closed:
                raise ConnectionError(f"{self._host}:{self._port} closed a new connection at once")
            try:
                status, headers, data, keep = await conn.send(message, loop)
            except BaseException:
                # Cancelled (timeout), failed mid-response or closed before any byte of it: unusable. A close
                # before the response is not resent here, even on a pooled connection: the request was written
                # and the server may have read (and run) it, so it is a request sent, with its ledger row and a
                # backed-off retry. (An idle connection the server closed is dropped before it is used, above.)
                conn.transport.abort()  # type: ignore[union-attr]
                raise
            if keep and not conn.closed:
                conn.expires_at = loop.time() + _keep_alive_s(headers)
                self._idle.append(conn)
            else:
                conn.transport.close()  # type: ignore[union-attr]
            encoding = headers.get("content-encoding", "").lower()
            try:
                if encoding in ("gzip", "x-gzip"):
                    data = zlib.decompress(data, 16 + zlib.MAX_WBITS)
                elif encoding == "deflate":
                    data = zlib.decompress(data)
            except zlib.error as exc:  # a transport fault like a torn body: retried
                raise ConnectionError(f"malformed {encoding} body: {exc}") from exc
            return status, headers, data

    async def chat(self, body: dict[str, Any]) -> Reply:
        status, headers, data = await self.request("POST", "/chat/completions", dumps(body))
        if status == 200:
            try:
                return Reply(status, headers, loads(data), "")
            except ValueError:
                pass  # not JSON: the caller sees data=None and retries
        return Reply(status, headers, None, data[:2000].decode("utf-8", "replace"))

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            if conn.transport is not None:
                conn.transport.close()
        await asyncio.sleep(0)  # let the transports finish closing on this loop


def _keep_alive_s(headers: Mapping[str, str]) -> float:
    """How long an idle connection may be reused: a second less than the server's ``Keep-Alive:
    timeout=N``, else 5 s (httpx's default), so a request never races the server's idle close."""
    match = re.search(r"timeout=(\d+)", headers.get("keep-alive", ""))
    return max(0.0, int(match.group(1)) - 1.0) if match else 5.0


def _parse_head(head: bytes) -> tuple[int, dict[str, str], bool]:
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    if not version.startswith("HTTP/"):
        raise ValueError(f"not an HTTP response: {lines[0][:100]!r}")
    status = int(rest[:3])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            name, value = name.strip().lower(), value.strip()
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
    connection = headers.get("connection", "").lower()
    keep = "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection
    return status, headers, keep


class SDKTransport:
    """The official openai client: used for an injected client, behind a proxy, or when asked."""

    def __init__(self, client: openai.AsyncOpenAI):
        self.client = client

    async def chat(self, body: dict[str, Any]) -> Reply:
        try:
            raw = await self.client.chat.completions.with_raw_response.create(**body)
        except openai.APIStatusError as exc:  # the body as the server sent it (the SDK's message drops a plain-text one)
            return Reply(exc.status_code, {k.lower(): v for k, v in exc.response.headers.items()}, None, exc.response.text[:2000] or str(exc))
        except openai.APITimeoutError as exc:
            raise TimeoutError(str(exc)) from exc
        except openai.APIConnectionError as exc:
            raise ConnectionError(str(exc)) from exc
        # The body as JSON, as the fast transport reads it: the SDK's parse() returns a str for an
        # HTML page and a half-built model for JSON that is not a completion.
        headers = {k.lower(): v for k, v in raw.headers.items()}
        data = raw.http_response.content
        try:
            return Reply(raw.status_code, headers, loads(data), "")
        except ValueError:
            return Reply(raw.status_code, headers, None, data[:2000].decode("utf-8", "replace"))

    async def close(self) -> None:
        pass
