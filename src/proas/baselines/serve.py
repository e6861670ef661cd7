"""``proas serve``: a proas checkpoint behind an OpenAI-compatible chat endpoint on loopback.

Endpoints (the subset of OpenAI's API a ReAct agent needs):

- ``POST /v1/chat/completions``: ``{"model", "messages", "temperature"?, "seed"?}`` in the ReAct
  format of ``proas.baselines.react_format``; answers a ``chat.completion`` object whose one
  choice is ``Thought: ...\\nAction: ...``. The policy acts on the ``Context`` rebuilt from the
  conversation (task, history, observation, admissible actions), so a conversation replayed
  from an episode gives the policy exactly what the rollout gives it, except the env's invalid
  candidates (a chat carries only the admissible actions).
- ``GET /v1/models``: the one model, named after the checkpoint (or ``--model-name``).

Sampling uses the request's ``temperature`` (default: the checkpoint's validation temperature)
and a generator seeded from ``--seed``; a request's ``seed`` makes its reply reproducible (it
seeds numpy's generator for the scorer and torch's for the lm). Requests are served one at
a time (the policy is not thread-safe). The server binds loopback addresses only: it exposes a
model without authentication.
"""

from __future__ import annotations

import ipaddress
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np

from proas.baselines.common import load_policy
from proas.baselines.react_format import format_reply, parse_conversation
from proas.errors import ProasError
from proas.policies.base import Context

__all__ = ["PolicyServer", "check_loopback", "make_server"]

_LOOPBACK_NAMES = {"localhost"}


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

    def complete(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise ProasError("the request body must be a JSON object")
        conv = parse_conversation(body.get("messages"))
        temperature = body.get("temperature", self.cfg.policy.val_temperature)
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or temperature < 0:
            raise ProasError("'temperature' must be a number >= 0")
        ctx = Context(env_name=self.env_name, task=conv.task, observation=conv.observation,
                      history=conv.history, admissible=conv.admissible, invalid_candidates=[], step=conv.step)
        with self.lock:
            seed = body.get("seed")
            if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
                raise ProasError("'seed' must be an integer")
            rng = self.rng if seed is None else np.random.default_rng(seed)
            if seed is not None:  # the lm samples with torch's generator, the scorer with ``rng``
                import torch

                torch.manual_seed(seed)
            dec = self.policy.act([ctx], rng, temperature=float(temperature))[0]
        thought = _thought(dec.response, self.policy.kind, dec.logp, conv.admissible)
        content = format_reply(thought, dec.action)
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in body["messages"])
        completion_tokens = len(content.split())
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": "stop", "logprobs": None}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }

    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": self.model, "object": "model", "created": 0, "owned_by": "proas"}]}


def _env_label(cfg) -> str:
    from proas.train.loop import make_env_factory

    return str(getattr(make_env_factory(cfg.env.name, cfg.env.options)(), "name", cfg.env.name))


def _thought(response: str, kind: str, logp: float, admissible) -> str:
    """The thought of a reply: the lm's own ``<think>`` text; for the scorer, what it did."""
    if kind == "lm":
        import re

        m = re.search(r"<think>(.*?)</think>", response, re.DOTALL | re.IGNORECASE)
        return m.group(1).strip() if m else response.strip()
    n = len(admissible) if admissible is not None else 0
    return f"the scorer policy picked this action with probability {np.exp(logp):.2f} among {n} candidates."


def make_server(server: PolicyServer, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """An HTTP server for ``server`` on ``host:port`` (port 0 = any free port); not started."""
    host = check_loopback(host)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # quiet: one line per request would drown the client's output
            pass

        def _send(self, code: int, obj: Any) -> None:
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, code: int, msg: str, kind: str = "invalid_request_error") -> None:
            self._send(code, {"error": {"message": msg, "type": kind, "code": code}})

        def do_GET(self):
            if self.path.rstrip("/") == "/v1/models":
                self._send(200, server.models())
            else:
                self._error(404, f"no route {self.path}")

        def do_POST(self):
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._error(404, f"no route {self.path}")
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"null")
            except (ValueError, UnicodeDecodeError):
                self._error(400, "the request body is not JSON")
                return
            try:
                self._send(200, server.complete(body))
            except ProasError as exc:
                self._error(400, str(exc))
            except Exception as exc:  # noqa: BLE001 - the server must answer, not die
                self._error(500, f"{type(exc).__name__}: {exc}", "server_error")

    family_v6 = ":" in host
    cls = ThreadingHTTPServer
    if family_v6:
        import socket

        class V6(ThreadingHTTPServer):
            address_family = socket.AF_INET6

        cls = V6
    try:
        return cls((host, port), Handler)
    except OSError as exc:
        raise ProasError(f"cannot listen on {host}:{port} ({exc.strerror or exc})") from None
