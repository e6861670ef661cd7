"""``proas serve`` hardening (issue #27): one request cannot hold the others, only loopback
``Host`` names and JSON bodies are answered, and a request waits for the policy only once its
body is in."""

import json
import socket
import threading
import time

import pytest
import torch

from proas.baselines import serve
from proas.baselines.direct import direct_eval
from proas.baselines.react_format import format_observation
from proas.baselines.serve import PolicyServer, ServeLimits, make_server
from proas.train.config import build_config

torch.set_num_threads(1)

TOY = ["env.name=toy_env:make_env", "env.options.n_places=4", "env.options.max_steps=8", "env.options.n_train=32",
       "env.options.n_valid=16", "train.progress=false", "env.fixed_val_set.size=1"]
OBS = format_observation("You are at the door.", ["go to desk", "go to bed"], task="put the key on the bed")


@pytest.fixture(scope="module")
def policy_server(tmp_path_factory):
    run = tmp_path_factory.mktemp("serve") / "direct"
    direct_eval(build_config(TOY), tasks=1, save=run)
    return PolicyServer(run, seed=0)


class Started:
    """``policy_server`` behind HTTP on a free loopback port, with ``limits``; stopped on exit."""

    def __init__(self, server, **limits):
        self.httpd = make_server(server, "127.0.0.1", 0, ServeLimits(**limits))
        self.port = self.httpd.server_address[1]
        self.queue = self.httpd.app.state.queue

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture()
def served(policy_server):
    with Started(policy_server) as srv:
        yield srv


def chat_body(content: str = OBS, **extra) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": content}], "temperature": 0.0,
                       **extra}).encode()


def request(port: int, body: bytes | None = None, *, method: str = "POST", path: str = "/v1/chat/completions",
            headers: dict[str, str] | None = None, host: str | None = None, version: str = "1.1",
            timeout: float = 30.0) -> tuple[int, dict, dict]:
    """One raw HTTP request (exactly the headers given; ``Host`` defaults to the server's address)
    and ``(status, headers, JSON body)`` of its answer."""
    lines = [f"{method} {path} HTTP/{version}"]
    if host is not None or version == "1.1":
        lines.append(f"Host: {f'127.0.0.1:{port}' if host is None else host}")
    hdrs = {"Content-Type": "application/json"} if headers is None else headers
    lines += [f"{k}: {v}" for k, v in hdrs.items()]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    lines.append("Connection: close")
    data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        buf = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    head, _, payload = buf.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    answer_headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in header_lines)}
    return int(status_line.split()[1]), answer_headers, json.loads(payload) if payload else {}


def counting_act(server):
    """Patch ``server.policy.act`` to count its calls; returns the list of calls and the original."""
    calls, act = [], server.policy.act

    def counted(*a, **k):
        calls.append(1)
        return act(*a, **k)

    server.policy.act = counted
    return calls, act


# --- item 1: one slow request cannot hold the others ---------------------------------------------

def test_a_request_whose_text_is_slow_to_parse_does_not_hold_the_others(policy_server, monkeypatch):
    """Parsing runs off the policy's thread: a request stuck in parsing (simulated: 3 s) does not
    delay a request that arrives after it."""
    parse = serve.parse_conversation

    def slow_parse(messages):
        if "SLOW" in messages[-1]["content"]:
            time.sleep(3.0)
        return parse(messages)

    monkeypatch.setattr(serve, "parse_conversation", slow_parse)
    with Started(policy_server) as srv:
        results = {}

        def post(name, body):
            t0 = time.monotonic()
            status = request(srv.port, body)[0]
            results[name] = (status, time.monotonic() - t0)

        slow = threading.Thread(target=post, args=("slow", chat_body(OBS.replace("door", "door SLOW"))))
        slow.start()
        time.sleep(0.3)  # the slow one is being parsed
        post("fast", chat_body())
        assert results["fast"][0] == 200 and results["fast"][1] < 1.5, results
        assert "slow" not in results  # answered while the slow one still parses
        slow.join(timeout=30)
        assert results["slow"][0] == 200 and results["slow"][1] >= 2.9
