"""``proas serve``: a proas checkpoint behind an OpenAI-compatible chat endpoint on loopback.

Endpoints (the subset of OpenAI's API a ReAct agent needs):

- ``POST /v1/chat/completions``: an OpenAI chat-completions request (``ChatCompletionRequest``:
  ``messages``, ``model``?, ``temperature``?, ``seed``?, ``n``?, ``max_tokens``?) whose messages
  follow the ReAct format of ``proas.baselines.react_format``; answers a ``chat.completion``
  object whose choices are ``Thought: ...\\nAction: ...``. The policy acts on the ``Context``
  rebuilt from the conversation (task, history, observation, admissible actions), so a
  conversation replayed from an episode gives the policy exactly what the rollout gives it,
  except the env's invalid candidates (a chat carries only the admissible actions).
- ``GET /v1/models``: the one model, named after the checkpoint (or ``--model-name``).

Sampling uses the request's ``temperature`` (default: the checkpoint's validation temperature)
and a generator seeded from ``--seed``; a request's ``seed`` makes its reply reproducible (it
seeds numpy's generator for the scorer and torch's for the lm).

The HTTP side is uvicorn (h11) running a Starlette app; requests are validated with pydantic.
Limits (``ServeLimits``): a body larger than ``max_body`` bytes is answered 413 as soon as its
declared length or the bytes read so far pass the limit; a body not received within
``read_timeout`` seconds is answered 408 (both close the connection); a connection whose request
headers have not arrived within ``read_timeout`` seconds is closed; idle keep-alive connections
are closed after ``keep_alive`` seconds. The policy is not thread-safe and runs one
request at a time on its own thread; up to ``max_queue`` further requests wait in FIFO order,
and a request beyond that is answered 503 (with ``Retry-After``), which ``proas react``
retries. A request enters that queue only once its body is in and parsed: a client still
uploading holds a connection, not a place in the queue. A request is validated and its
conversation parsed on another thread, before it waits for the policy, so neither the event
loop nor the policy's thread spends time on another request's text; parsing is linear in the
body (``proas.baselines.react_format``): a body of ``max_body`` = 1 MiB parses in milliseconds.
Every error is an OpenAI-style JSON body
``{"error": {"message", "type", "param", "code"}}``: 400 for malformed JSON (including nesting
deeper than the parser's limit of 200 levels) and for schema or conversation-format errors,
404/405 for unknown routes and methods.

The server binds loopback addresses only: it exposes a model without authentication. Web pages
in the user's browser are kept out too: every request must name a loopback host in its ``Host``
header (``localhost``, an address of 127.0.0.0/8 or ``[::1]``, with or without a port; the
address bound is always one of them), else it is answered 403 (``permission_error``), which
defeats DNS rebinding (a page of ``evil.example`` whose name now resolves to 127.0.0.1 still
sends ``Host: evil.example``); and a chat request's body must be sent as ``Content-Type:
application/json``, else 415, so a page cannot post to it without a CORS preflight, which the
server does not grant (it answers ``OPTIONS`` 405 without CORS headers).
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError, field_validator
from typing_extensions import TypedDict

from proas.baselines.common import load_policy
from proas.baselines.react_format import ConversationState, format_reply, parse_conversation
from proas.errors import ProasError
from proas.policies.base import Context

__all__ = ["MAX_N", "MAX_SEED", "ChatCompletionRequest", "ChatMessage", "PolicyServer", "PreparedRequest",
           "ServeLimits", "ServerHandle", "check_loopback", "create_app", "json_content_type", "loopback_host",
           "make_server", "parse_request"]

_LOOPBACK_NAMES = {"localhost"}
_LOOPBACK_V4 = ipaddress.IPv4Network("127.0.0.0/8")
_LOOPBACK_V6 = ipaddress.IPv6Address("::1")
MAX_SEED = 2**63 - 1  # torch.manual_seed takes a 64-bit seed; OpenAI's servers take a signed 64-bit one
MAX_N = 16  # choices per request: each one is a policy sample
# literals and one character class: linear on any text (tests/test_react_parse_work.py)
_THINK_OPEN = re.compile(r"(?i:<think>)")
_THINK_CLOSE = re.compile(r"(?i:</think>)")
_TOKEN = re.compile(r"\S+")


def check_loopback(host: str) -> str:
    """``host`` if it is a loopback address, else a ``ProasError``."""
    if host in _LOOPBACK_NAMES:
        return "127.0.0.1"
    try:
        if ipaddress.ip_address(host).is_loopback:
            return host
    except ValueError:
        pass
    raise ProasError(f"--host {host!r}: proas serve binds loopback addresses only (127.0.0.1, ::1, localhost)")


def loopback_host(value: str) -> bool:
    """Whether a ``Host`` header names this machine's loopback: ``localhost`` (any case), an
    IPv4 address of 127.0.0.0/8 in dotted-quad form or ``[::1]``, each with or without a port.
    Anything else (another name, ``localhost.``, a subdomain, a bare ``::1``, an empty port) is
    not."""
    if value.startswith("["):
        host, bracket, rest = value[1:].partition("]")
        if not bracket or (rest and not (rest.startswith(":") and _port(rest[1:]))):
            return False
        try:
            return ipaddress.IPv6Address(host) == _LOOPBACK_V6
        except ValueError:
            return False
    host, colon, port = value.partition(":")
    if colon and not _port(port):
        return False
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.IPv4Address(host) in _LOOPBACK_V4
    except ValueError:
        return False


def _port(text: str) -> bool:
    return 0 < len(text) <= 5 and text.isascii() and text.isdigit() and int(text) <= 65535


def json_content_type(value: str | None) -> bool:
    """Whether a ``Content-Type`` header is ``application/json`` (any case; parameters such as
    ``charset`` allowed)."""
    return value is not None and value.partition(";")[0].strip().lower() == "application/json"


# --- the request schema ------------------------------------------------------------------------

class ChatMessage(TypedDict):
    """One message of the conversation; other OpenAI message fields are ignored. A typed dict,
    not a model: a body of a MiB can hold 25,000 messages, which validate as dicts 3-4 times
    faster than as model instances."""

    role: Literal["system", "user", "assistant"]
    content: StrictStr


_Temperature = Annotated[float, Field(strict=True, ge=0.0, le=2.0, allow_inf_nan=False)]
_Seed = Annotated[int, Field(strict=True, ge=0, le=MAX_SEED)]
_PositiveInt = Annotated[int, Field(strict=True, ge=1)]


class ChatCompletionRequest(BaseModel):
    """The fields of OpenAI's chat-completions request that the server reads; others are ignored.

    ``model`` is not checked against the served model's name (any name is answered).
    ``max_tokens`` (or ``max_completion_tokens``) truncates a reply to that many whitespace-separated
    tokens, the unit of ``usage``; the choice's ``finish_reason`` is then ``"length"``.
    """

    model_config = ConfigDict(extra="ignore")

    model: StrictStr | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    temperature: _Temperature | None = None
    seed: _Seed | None = None
    n: Annotated[int, Field(strict=True, ge=1, le=MAX_N)] = 1
    max_tokens: _PositiveInt | None = None
    max_completion_tokens: _PositiveInt | None = None
    stream: bool | None = False

    @field_validator("stream")
    @classmethod
    def _no_stream(cls, v: bool | None) -> bool | None:
        if v:
            raise ValueError("streaming is not supported by proas serve")
        return v


def validation_message(exc: ValidationError) -> tuple[str, str | None]:
    """``(message, param)`` of a pydantic error, without echoing the (possibly huge) input."""
    errs = exc.errors(include_url=False, include_input=False, include_context=False)
    parts, param = [], None
    for e in errs[:5]:
        if e["type"] == "json_invalid":
            return f"the request body is not valid JSON ({e['msg'].removeprefix('Invalid JSON: ')})", None
        loc = "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else str(p)) for i, p in enumerate(e["loc"]))
        param = param or (loc or None)
        msg = e["msg"].removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else f"the request body: {msg}")
    more = f" (and {len(errs) - 5} more errors)" if len(errs) > 5 else ""
    return "; ".join(parts) + more, param


# --- the policy ----------------------------------------------------------------------------------

class PolicyServer:
    """The policy of a checkpoint answering ReAct conversations."""

    def __init__(self, target: str | Path, *, seed: int = 0, model_name: str | None = None):
        self.policy, self.cfg, self.directory, state = load_policy(target)
        self.env_name = self.cfg.env.name if ":" not in self.cfg.env.name else _env_label(self.cfg)
        self.model = model_name or f"proas-{self.cfg.policy.kind}-{self.directory.parent.name}-{self.directory.name}"
        self.step = int(state.get("step", -1))
        self.rng = np.random.default_rng(seed)
        import torch

        torch.manual_seed(seed)  # the lm policy samples with torch's generator
        self.lock = threading.Lock()

    def complete(self, body: ChatCompletionRequest | dict[str, Any]) -> dict[str, Any]:
        """The ``chat.completion`` answer to a request (a validated model or its JSON object).

        Raises ``ProasError`` for an invalid request (the server answers 400).
        """
        return self.answer(self.prepare(body))

    def prepare(self, body: ChatCompletionRequest | dict[str, Any]) -> PreparedRequest:
        """The request validated and its conversation parsed: all the work on the request's text,
        which needs no policy (the server does it off the policy's thread). ``ProasError`` for
        an invalid request."""
        if not isinstance(body, ChatCompletionRequest):
            if not isinstance(body, dict):
                raise ProasError("the request body must be a JSON object")
            try:
                body = ChatCompletionRequest.model_validate(body)
            except ValidationError as exc:
                raise ProasError(validation_message(exc)[0]) from None
        conv = parse_conversation(body.messages)
        ctx = Context(env_name=self.env_name, task=conv.task, observation=conv.observation,
                      history=conv.history, admissible=conv.admissible, invalid_candidates=[], step=conv.step)
        return PreparedRequest(body, conv, ctx, sum(len(m["content"].split()) for m in body.messages))

    def answer(self, prepared: PreparedRequest) -> dict[str, Any]:
        """The ``chat.completion`` answer to a prepared request: the policy's part."""
        body, conv, ctx = prepared.request, prepared.conversation, prepared.context
        temperature = float(self.cfg.policy.val_temperature if body.temperature is None else body.temperature)
        with self.lock:
            rng = self.rng if body.seed is None else np.random.default_rng(body.seed)
            if body.seed is not None:  # the lm samples with torch's generator, the scorer with ``rng``
                import torch

                torch.manual_seed(body.seed)
            decisions = self.policy.act([ctx] * body.n, rng, temperature=temperature)
        limit = body.max_completion_tokens or body.max_tokens
        choices, completion_tokens = [], 0
        for i, dec in enumerate(decisions):
            content = format_reply(_thought(dec.response, self.policy.kind, dec.logp, conv.admissible), dec.action)
            content, finish = _truncate(content, limit)
            completion_tokens += len(content.split())
            choices.append({"index": i, "message": {"role": "assistant", "content": content},
                            "finish_reason": finish, "logprobs": None})
        prompt_tokens = prepared.prompt_tokens
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": choices,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }

    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": self.model, "object": "model", "created": 0, "owned_by": "proas"}]}


@dataclass(frozen=True)
class PreparedRequest:
    """A validated request with its conversation parsed (``PolicyServer.prepare``)."""

    request: ChatCompletionRequest
    conversation: ConversationState
    context: Context
    prompt_tokens: int  # whitespace-separated tokens of all messages (``usage``)


def _env_label(cfg) -> str:
    from proas.envs import make_factory

    return str(getattr(make_factory(cfg.env.name, cfg.env.options, config=True)(), "name", cfg.env.name))


def _thought(response: str, kind: str, logp: float, admissible) -> str:
    """The thought of a reply: the lm's own ``<think>`` text (of the first ``<think>`` and the
    first ``</think>`` after it); for the scorer, what it did."""
    if kind == "lm":
        opened = _THINK_OPEN.search(response)
        closed = None if opened is None else _THINK_CLOSE.search(response, opened.end())
        return response[opened.end():closed.start()].strip() if closed is not None else response.strip()
    n = len(admissible) if admissible is not None else 0
    return f"the scorer policy picked this action with probability {np.exp(logp):.2f} among {n} candidates."


def _truncate(content: str, limit: int | None) -> tuple[str, str]:
    """``content`` cut after ``limit`` whitespace-separated tokens, and the finish reason."""
    if limit is None:
        return content, "stop"
    for k, m in enumerate(_TOKEN.finditer(content), 1):
        if k == limit and content[m.end():].strip():
            return content[: m.end()], "length"
    return content, "stop"


# --- the HTTP app --------------------------------------------------------------------------------

@dataclass(frozen=True)
class ServeLimits:
    """The server's limits (see the module docstring)."""

    max_body: int = 1 << 20  # bytes
    read_timeout: float = 10.0  # seconds to receive a request's body
    max_queue: int = 256  # requests waiting for the policy beyond the one it is answering
    keep_alive: float = 5.0  # seconds an idle keep-alive connection stays open

    def __post_init__(self) -> None:
        if self.max_body < 1 or self.read_timeout <= 0 or self.max_queue < 0 or self.keep_alive <= 0:
            raise ProasError("serve limits: --max-body must be >= 1, --read-timeout and --keep-alive > 0, "
                             "--max-queue >= 0")


class _HTTPError(Exception):
    def __init__(self, status: int, message: str, *, kind: str = "invalid_request_error", param: str | None = None,
                 close: bool = False, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.param = status, message, kind, param
        self.headers = dict(headers or {})
        if close:
            self.headers["Connection"] = "close"


def _error_response(status: int, message: str, kind: str = "invalid_request_error", param: str | None = None,
                    headers: dict[str, str] | None = None):
    from starlette.responses import JSONResponse

    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": status}},
                        status_code=status, headers=headers)


class _PolicyQueue:
    """Runs ``PolicyServer.complete`` one request at a time on one thread, with a bounded FIFO wait."""

    def __init__(self, server: PolicyServer, max_queue: int):
        self.server = server
        self.max_queue = max_queue
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="proas-policy")
        # validation and parsing: off the event loop and off the policy's thread
        self.parser = ThreadPoolExecutor(2, thread_name_prefix="proas-parse")
        self.admitted = 0  # running + waiting (touched on the event loop only)
        self._lock: asyncio.Lock | None = None

    def admit(self) -> None:
        if self.admitted > self.max_queue:
            raise _HTTPError(503, f"the server is busy ({self.admitted} requests in progress or queued); retry later",
                             kind="server_busy", headers={"Retry-After": "1"})
        self.admitted += 1

    def release(self) -> None:
        self.admitted -= 1

    async def parse(self, body: bytes) -> PreparedRequest:
        return await asyncio.get_running_loop().run_in_executor(self.parser, parse_request, self.server, body)

    async def run(self, prepared: PreparedRequest) -> dict[str, Any]:
        if self._lock is None:
            self._lock = asyncio.Lock()  # FIFO: waiters acquire in arrival order
        async with self._lock:
            return await asyncio.get_running_loop().run_in_executor(self.executor, self.server.answer, prepared)

    def shutdown(self) -> None:
        for executor in (self.executor, self.parser):
            executor.shutdown(wait=False, cancel_futures=True)


def parse_request(server: PolicyServer, body: bytes) -> PreparedRequest:
    """A request body validated (``ChatCompletionRequest``) and its conversation parsed
    (``PolicyServer.prepare``); a ``_HTTPError`` 400 naming the offending field if it is invalid."""
    try:
        req = ChatCompletionRequest.model_validate_json(body or b"null")
    except ValidationError as exc:
        message, param = validation_message(exc)
        raise _HTTPError(400, message, param=param) from None
    try:
        return server.prepare(req)
    except ProasError as exc:
        raise _HTTPError(400, str(exc), param="messages") from None


async def _read_body(request, limits: ServeLimits) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and int(declared) > limits.max_body:  # h11 has checked it is a number
        raise _HTTPError(413, f"the request body ({int(declared)} bytes) is larger than the limit of "
                              f"{limits.max_body} bytes", close=True)
    chunks: list[bytes] = []
    size = 0

    async def read() -> None:
        nonlocal size
        async for chunk in request.stream():
            size += len(chunk)
            if size > limits.max_body:
                raise _HTTPError(413, f"the request body is larger than the limit of {limits.max_body} bytes",
                                 close=True)
            chunks.append(chunk)

    try:
        await asyncio.wait_for(read(), limits.read_timeout)
    except asyncio.TimeoutError:
        raise _HTTPError(408, f"the request body was not received within {limits.read_timeout:g} s "
                              f"({size} bytes read{'' if declared is None else f' of {declared} declared'})",
                         close=True) from None
    return b"".join(chunks)


class _LoopbackHostOnly:
    """ASGI middleware: a request whose ``Host`` is not a loopback name (``loopback_host``), or
    that has none or several, is answered 403 before any route sees it."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            hosts = [v.decode("latin-1") for k, v in scope["headers"] if k == b"host"]
            if len(hosts) != 1 or not loopback_host(hosts[0]):
                shown = repr(hosts[0][:100]) if len(hosts) == 1 else ("missing" if not hosts else "given twice")
                response = _error_response(
                    403, f"the Host header ({shown}) is not a loopback name: proas serve answers requests "
                         "addressed to localhost, 127.0.0.0/8 or [::1] only", "permission_error",
                    headers={"Connection": "close"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_app(server: PolicyServer, limits: ServeLimits | None = None):
    """The ASGI app serving ``server`` (its queue is ``app.state.queue``)."""
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.middleware import Middleware
    from starlette.requests import ClientDisconnect
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    limits = limits or ServeLimits()
    queue = _PolicyQueue(server, limits.max_queue)

    async def chat(request):
        admitted = False
        try:
            content_type = request.headers.get("content-type")
            if not json_content_type(content_type):
                shown = "none" if content_type is None else repr(content_type[:100])
                raise _HTTPError(415, f"the request body must be JSON sent with Content-Type: application/json "
                                      f"(Content-Type: {shown})", close=True)
            body = await _read_body(request, limits)
            prepared = await queue.parse(body)
            # only now does the request wait for the policy: one still uploading takes no place in
            # the queue, so slow uploads cannot fill it (they end in 408 after read_timeout)
            queue.admit()
            admitted = True
            return JSONResponse(await queue.run(prepared))
        except _HTTPError as exc:
            return _error_response(exc.status, exc.message, exc.kind, exc.param, exc.headers)
        except ClientDisconnect:
            return _error_response(400, "the client disconnected before sending the whole body",
                                   headers={"Connection": "close"})
        except Exception as exc:  # noqa: BLE001 - the server must answer, not die
            return _error_response(500, f"{type(exc).__name__}: {exc}", "server_error")
        finally:
            if admitted:
                queue.release()

    async def models(request):
        return JSONResponse(server.models())

    async def http_error(request, exc: HTTPException):
        detail = {404: f"no route {request.method} {request.url.path}",
                  405: f"method {request.method} is not allowed on {request.url.path}"}.get(exc.status_code, exc.detail)
        return _error_response(exc.status_code, str(detail), headers=exc.headers)

    async def server_error(request, exc: Exception):
        return _error_response(500, f"{type(exc).__name__}: {exc}", "server_error")

    routes = [Route(p, chat, methods=["POST"]) for p in ("/v1/chat/completions", "/v1/chat/completions/")]
    routes += [Route(p, models, methods=["GET"]) for p in ("/v1/models", "/v1/models/")]
    app = Starlette(routes=routes, exception_handlers={HTTPException: http_error, Exception: server_error},
                    middleware=[Middleware(_LoopbackHostOnly)])
    app.state.queue = queue
    app.state.limits = limits
    return app


def _h11_protocol(header_timeout: float):
    """uvicorn's h11 protocol, also closing a connection whose request line and headers have not
    arrived ``header_timeout`` seconds after the connection was made or the request's first bytes
    (uvicorn times out idle keep-alive connections, not a request that stalls in its headers)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class Protocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None
        _timed_scope: Any = None

        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            waiting_for_headers = self.cycle is None or self.cycle.response_complete
            if waiting_for_headers and (self._header_timer is None or self._timed_scope is not self.scope):
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
            self._timed_scope = self.scope  # a new request replaces the scope
            self._header_timer = self.loop.call_later(header_timeout, self._expired, self.scope)

        def _expired(self, scope) -> None:
            self._header_timer = None
            if self.scope is scope and not self.transport.is_closing():
                self.transport.close()

    return Protocol


class ServerHandle:
    """A bound, listening server: ``serve_forever()`` (blocks), ``shutdown()`` (from another
    thread; returns once ``serve_forever`` has returned), ``server_close()``, ``server_address``;
    the names of ``socketserver``'s servers."""

    def __init__(self, app, sock: socket.socket, limits: ServeLimits):
        import uvicorn

        self.app = app
        self.socket = sock
        self.server_address = sock.getsockname()
        self.config = uvicorn.Config(
            app,
            http=_h11_protocol(limits.read_timeout),
            ws="none",
            lifespan="off",
            log_config=None,
            log_level="warning",
            access_log=False,
            backlog=2048,
            timeout_keep_alive=limits.keep_alive,  # type: ignore[arg-type]  (call_later takes a float)
            timeout_graceful_shutdown=5,
        )
        self.server = uvicorn.Server(self.config)
        self._started = threading.Event()
        self._stopped = threading.Event()

    def serve_forever(self) -> None:
        self._started.set()
        try:
            self.server.run(sockets=[self.socket])
        finally:
            self._stopped.set()

    def shutdown(self, timeout: float = 30.0) -> None:
        self.server.should_exit = True
        if self._started.is_set():
            self._stopped.wait(timeout)

    def server_close(self) -> None:
        self.socket.close()
        self.app.state.queue.shutdown()


def make_server(server: PolicyServer, host: str = "127.0.0.1", port: int = 0,
                limits: ServeLimits | None = None) -> ServerHandle:
    """A server for ``server`` bound and listening on ``host:port`` (port 0 = any free port);
    clients that connect before ``serve_forever`` wait in the listen backlog."""
    host = check_loopback(host)
    limits = limits or ServeLimits()
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # not SO_REUSEPORT: a busy port stays busy
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise ProasError(f"cannot listen on {host}:{port} ({exc.strerror or exc})") from None
    sock.setblocking(False)
    return ServerHandle(create_app(server, limits), sock, limits)
