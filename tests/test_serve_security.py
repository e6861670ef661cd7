"""``proas serve`` hardening (issue #27): one request cannot hold the others, only loopback
``Host`` names and JSON bodies are answered, and a request waits for the policy only once its
body is in."""

import ipaddress
import json
import socket
import threading
import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from proas.baselines import serve
from proas.baselines.direct import direct_eval
from proas.baselines.react_format import format_observation
from proas.baselines.serve import PolicyServer
from proas.train.config import build_config
from serve_helpers import Started

torch.set_num_threads(1)

TOY = ["env.name=toy_env:make_env", "env.options.n_places=4", "env.options.max_steps=8", "env.options.n_train=32",
       "env.options.n_valid=16", "train.progress=false", "env.fixed_val_set.size=1"]
OBS = format_observation("You are at the door.", ["go to desk", "go to bed"], task="put the key on the bed")


@pytest.fixture(scope="module")
def policy_server(tmp_path_factory):
    run = tmp_path_factory.mktemp("serve") / "direct"
    direct_eval(build_config(TOY), tasks=1, save=run)
    return PolicyServer(run, seed=0)


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
    data = ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8") + (body or b"")
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
    try:
        answer = json.loads(payload)
    except ValueError:  # uvicorn's own plain-text answers to requests that are not HTTP
        answer = {"text": payload.decode("latin-1")}
    return int(status_line.split()[1]), answer_headers, answer


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


# --- item 2: only loopback Host names, only JSON bodies ------------------------------------------

LOOPBACK_HOSTS = ["localhost", "LocalHost", "localhost:8000", "127.0.0.1", "127.0.0.1:1", "127.0.0.1:65535",
                  "127.1.2.3", "127.255.255.254:80", "[::1]", "[::1]:8000", "[0:0:0:0:0:0:0:1]:8000"]
OTHER_HOSTS = ["evil.example", "evil.example:8000", "localhost.evil.example", "evil.localhost", "localhost.",
               "127.0.0.1.nip.io", "127.0.0.1.evil.example:8000", "0.0.0.0", "0.0.0.0:8000", "10.0.0.1",
               "192.168.1.20:8000", "128.0.0.1", "[::]", "[::2]:8000", "[::ffff:127.0.0.1]", "::1", "[::1",
               "[::1]x", "[::1]:", "localhost:", "127.0.0.1:port", "127.0.0.1:99999", "127.0.0.1:-1",
               "127.0.0.1:80:80", "127.1", "2130706433", "0x7f000001", "127.000.000.001", "127.0.0.1\u00b2",
               "localhost:8\u0660", "[::1%1]", "", " ", "localhost@evil.example", "evil.example#127.0.0.1"]


@pytest.mark.parametrize("host", LOOPBACK_HOSTS)
def test_loopback_host_names_are_answered(served, policy_server, host):
    status, _, body = request(served.port, method="GET", path="/v1/models", host=host)
    assert status == 200 and body["data"][0]["id"] == policy_server.model
    status, _, body = request(served.port, chat_body(), host=host)
    assert status == 200 and body["choices"][0]["message"]["content"].startswith("Thought: ")
    assert serve.loopback_host(host)


@pytest.mark.parametrize("host", OTHER_HOSTS)
def test_other_host_names_are_refused_before_anything_runs(served, policy_server, host):
    """DNS rebinding: a page of evil.example whose name now resolves to 127.0.0.1 sends its own
    name as Host; neither the models list nor a completion is given to it."""
    calls, act = counting_act(policy_server)
    try:
        for method, path, body in [("GET", "/v1/models", None), ("POST", "/v1/chat/completions", chat_body()),
                                   ("GET", "/nowhere", None), ("OPTIONS", "/v1/chat/completions", None)]:
            status, headers, answer = request(served.port, body, method=method, path=path, host=host)
            assert status == 403, (method, path, answer)
            assert answer["error"]["type"] == "permission_error" and "not a loopback name" in answer["error"]["message"]
            assert "\n" not in answer["error"]["message"] and headers.get("connection") == "close"
    finally:
        policy_server.policy.act = act
    assert calls == [] and not serve.loopback_host(host)


def test_a_missing_or_doubled_host_is_refused(served):
    status, _, answer = request(served.port, method="GET", path="/v1/models", version="1.0")  # HTTP/1.0: no Host
    assert status == 403 and "Host header (missing)" in answer["error"]["message"]
    status, _, answer = request(served.port, method="GET", path="/v1/models",
                                headers={"Host": "localhost"})  # and the default one: two
    assert status == 400  # h11 refuses it itself


@settings(max_examples=300, deadline=None)
@given(st.one_of(
    st.from_regex(r"[a-z0-9-]{1,12}(\.[a-z0-9-]{1,12}){0,3}(:[0-9]{0,6})?", fullmatch=True),
    st.from_regex(r"\[[0-9a-f:.]{0,20}\](:[0-9]{0,6})?", fullmatch=True),
    st.text(max_size=30),
))
def test_only_loopback_names_count_as_loopback(value):
    """Whatever ``loopback_host`` accepts is localhost or a loopback address, with a valid port."""
    if not serve.loopback_host(value):
        return
    if value.startswith("["):
        host, _, port = value[1:].partition("]")
        port = port[1:]
        assert ipaddress.ip_address(host) == ipaddress.ip_address("::1")
    else:
        host, _, port = value.partition(":")
        assert host.lower() == "localhost" or ipaddress.ip_address(host) in ipaddress.ip_network("127.0.0.0/8")
    assert port == "" or (port.isascii() and port.isdigit() and 0 <= int(port) <= 65535)


CONTENT_TYPES_REFUSED = [None, "", "text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                         "multipart/form-data; boundary=x", "text/json", "application/jsonp", "application/json-seq",
                         "application/json+x", "application/javascript", "application/json, text/plain",
                         "application/ json", "*/*"]


@pytest.mark.parametrize("content_type", CONTENT_TYPES_REFUSED)
def test_a_body_not_sent_as_json_is_refused(served, policy_server, content_type):
    """A page may post text/plain, form or multipart bodies without a CORS preflight: refused
    (415) before the body is read, even when it holds a valid request."""
    calls, act = counting_act(policy_server)
    try:
        headers = {} if content_type is None else {"Content-Type": content_type}
        status, answer_headers, answer = request(served.port, chat_body(), headers=headers)
    finally:
        policy_server.policy.act = act
    assert status == 415 and "Content-Type: application/json" in answer["error"]["message"]
    assert answer_headers.get("connection") == "close" and calls == []


@pytest.mark.parametrize("content_type", ["application/json", "Application/JSON", "application/json; charset=utf-8",
                                          "application/json;charset=UTF-8", " application/json "])
def test_a_json_body_is_answered(served, content_type):
    status, _, body = request(served.port, chat_body(), headers={"Content-Type": content_type})
    assert status == 200 and body["object"] == "chat.completion"


def test_a_browser_preflight_gets_no_cors_grant(served):
    """What a page's fetch() with Content-Type: application/json sends first: no
    Access-Control-Allow-* answer, so the browser never sends the request itself."""
    status, headers, _ = request(served.port, method="OPTIONS", headers={
        "Origin": "http://evil.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type"})
    assert status == 405 and not any(k.startswith("access-control-") for k in headers)


# --- item 3: a request waits for the policy only once its body is in -----------------------------

def _start_upload(port: int, style: str) -> socket.socket:
    """A client that sends its headers and a part of its body, then stalls."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            "Content-Type: application/json\r\n").encode()
    if style == "chunked":
        s.sendall(head + b"Transfer-Encoding: chunked\r\n\r\n10\r\n" + b"{" * 16 + b"\r\n")
    elif style == "partial body":
        s.sendall(head + b"Content-Length: 100000\r\n\r\n" + b"{" * 100)
    else:  # no body yet
        s.sendall(head + b"Content-Length: 1000\r\n\r\n")
    return s


@pytest.mark.parametrize("style", ["partial body", "chunked", "no body yet"])
def test_slow_uploads_take_no_place_in_the_queue(policy_server, style):
    """Many more stalled uploads than the queue has places: normal requests are still answered
    (before, each upload took a place, and everyone else got 503 until the uploads timed out)."""
    with Started(policy_server, max_queue=4, read_timeout=8.0) as srv:
        uploads = [_start_upload(srv.port, style) for _ in range(40)]
        try:
            time.sleep(0.5)  # all of them connected, their bodies being read
            t0 = time.monotonic()
            statuses = [request(srv.port, chat_body())[0] for _ in range(5)]
            assert statuses == [200] * 5 and time.monotonic() - t0 < 6  # well before the uploads time out
            assert srv.queue.admitted == 0  # the stalled uploads hold no place
        finally:
            for s in uploads:
                s.close()
