"""ReAct over HTTP: the chat format round-trips, ``react`` against ``serve`` on 127.0.0.1 plays the
served policy's own greedy actions, retries and unreachable endpoints."""

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
import torch

from proas.baselines.react import ChatClient
from proas.baselines.react_format import (
    format_observation,
    format_reply,
    parse_conversation,
    parse_reply,
)
from proas.baselines.serve import PolicyServer, check_loopback, make_server
from proas.baselines.sft import SFTOptions, train_sft
from proas.cli import main as proas_main
from proas.errors import ProasError
from proas.policies.base import Context, task_text
from proas.train.config import build_config
from serve_helpers import Started

torch.set_num_threads(1)

TOY = ["env.name=toy_env:make_env", "env.options.n_places=4", "env.options.max_steps=8", "env.options.n_train=32",
       "env.options.n_valid=16", "train.progress=false"]


def test_parse_reply_takes_the_last_action_line():
    assert parse_reply("Thought: go\nAction: Go To Desk", "household") == ("go", "go to desk", False)
    assert parse_reply("Thought: a\nAction: x\nThought: b\nAction: take key from desk") == (
        "a", "take key from desk", False)
    assert parse_reply("<think>t</think><action>click[Buy Now]</action>", "shop")[1:] == ("click[Buy Now]", False)
    assert parse_reply("I am not sure.\ngo to desk") == ("", "go to desk", True)
    assert parse_reply("") == ("", "", True)


def test_conversation_round_trip():
    msgs = [{"role": "system", "content": "rules"},
            {"role": "user", "content": format_observation("You are at the door.\nYour task is to: x.",
                                                           ["go to desk", "go to bed"], task="put the key on the bed")},
            {"role": "assistant", "content": format_reply("first\nthought", "go to desk")},
            {"role": "user", "content": format_observation("You arrive at the desk.\n\nIt is quiet.", ["go to bed"])}]
    conv = parse_conversation(msgs)
    assert conv.task == "put the key on the bed"
    assert conv.history == [("You are at the door.\nYour task is to: x.", "go to desk")]
    assert conv.observation == "You arrive at the desk.\n\nIt is quiet." and conv.admissible == ["go to bed"]
    assert conv.step == 1
    assert parse_conversation(msgs[:2]).admissible == [
        "go to desk", "go to bed"]
    # no admissible section: None (WebShop-like envs without a list)
    assert parse_conversation([{"role": "user", "content": format_observation("o", None, task="t")}]).admissible is None
    for bad, msg in [
        ([], "non-empty"),
        ([{"role": "user", "content": "hello"}], "Observation"),
        (msgs[:3], "last message"),
        ([msgs[3]], "Task"),
        (msgs[:2] + [msgs[3]], "two user messages"),
        ([{"role": "tool", "content": "x"}] + msgs[1:2], "role"),
    ]:
        with pytest.raises(ProasError, match=msg):
            parse_conversation(bad)


def test_only_loopback_hosts():
    assert check_loopback("127.0.0.1") == "127.0.0.1"
    assert check_loopback("localhost") == "127.0.0.1"
    assert check_loopback("::1") == "::1"
    for host in ("0.0.0.0", "10.0.0.1", "example.com", "::"):
        with pytest.raises(ProasError, match="loopback"):
            check_loopback(host)


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("react") / "sft"
    train_sft(build_config(TOY), d, SFTOptions(epochs=20, max_tasks=8, lr=0.05, batch_size=8, val_every=20))
    return d


@pytest.fixture()
def served(sft_run):
    server = PolicyServer(sft_run, seed=0)
    httpd = make_server(server, "127.0.0.1", 0)
    th = threading.Thread(target=httpd.serve_forever, daemon=True)
    th.start()
    yield server, f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def _local_greedy(policy, env, task_id, max_steps):
    """The served policy's greedy episode, played in-process on the contexts a chat carries."""
    obs, info = env.reset(task_id)
    task, history, actions = task_text(obs, info), [], []
    for t in range(max_steps):
        ctx = Context("toy", task, obs, list(history), info["admissible"], [], t)
        a = policy.act([ctx], np.random.default_rng(0), temperature=0.0)[0].action
        actions.append(a)
        history.append((obs, a))
        obs, _, terminated, truncated, info = env.step(a)
        done = terminated or truncated
        if done:
            break
    return actions


def test_react_against_serve_over_http(served, tmp_path, capsys):
    server, url = served
    out = tmp_path / "react.jsonl"
    rc = proas_main(["react", *TOY, "--base-url", url, "--model", server.model, "--tasks", "6",
                     "--temperature", "0", "--out", str(out), "--json"])
    assert rc == 0
    figures = json.loads(capsys.readouterr().out)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 6 and figures["requests"] == sum(len(r["steps"]) for r in rows)
    assert figures["sr"] == sum(r["won"] for r in rows) / 6 and figures["sr"] > 0
    from toy_env import make_env

    env = make_env(n_places=4, max_steps=8, n_valid=16)
    for r in rows:
        assert [s["action"] for s in r["steps"]] == _local_greedy(server.policy, env, r["task_id"], 8)
        assert all(s["reply"].startswith("Thought: the scorer policy") for s in r["steps"])


def test_serve_refuses_a_busy_port_a_missing_checkpoint_and_other_hosts(served, tmp_path, capsys):
    server, url = served
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    with pytest.raises(ProasError, match="cannot listen on 127.0.0.1"):
        make_server(server, "127.0.0.1", port)
    assert proas_main(["serve", str(tmp_path / "nothing")]) == 2
    assert proas_main(["serve", str(server.directory), "--host", "0.0.0.0"]) == 2
    for option, value in (("--max-body", "0"), ("--max-queue", "-1")):  # refused as the command line is parsed
        with pytest.raises(SystemExit) as stop:
            proas_main(["serve", str(server.directory), option, value])
        assert stop.value.code == 2
    assert "loopback addresses only" in capsys.readouterr().err


def test_serve_answers_openai_shapes_and_400_on_bad_requests(served):
    import urllib.error
    import urllib.request

    server, url = served
    with urllib.request.urlopen(f"{url}/models", timeout=10) as resp:
        assert json.loads(resp.read())["data"][0]["id"] == server.model
    req = urllib.request.Request(f"{url}/chat/completions", data=b'{"messages": [{"role": "user"}]}',
                                 headers={"Content-Type": "application/json"}, method="POST")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    assert err.value.code == 400
    error = json.loads(err.value.read())["error"]
    assert error["message"] == "messages[0].content: Field required" and error["param"] == "messages[0].content"
    client = ChatClient(url, server.model, retries=0)
    with pytest.raises(ProasError, match="HTTP 400"):  # a client error is not retried
        client.chat([{"role": "user", "content": "no format"}], 0.0)
    assert client.calls == 1
    reply = client.chat([{"role": "user", "content": format_observation("o", ["go to desk", "go to bed"], task="t")}],
                        0.5, seed=1)
    assert parse_reply(reply)[1] in ("go to desk", "go to bed")


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_unreachable_endpoint_is_one_clear_error_after_backoff(capsys):
    waits = []
    client = ChatClient(f"http://127.0.0.1:{_free_port()}/v1", "m", retries=3, backoff=0.5, sleep=waits.append)
    with pytest.raises(ProasError, match="cannot reach the chat endpoint .* after 4 attempts .*refused"):
        client.chat([{"role": "user", "content": "x"}], 0.0)
    assert waits == [0.5, 1.0, 2.0]
    rc = proas_main(["react", *TOY, "--base-url", f"http://127.0.0.1:{_free_port()}/v1", "--model", "m",
                     "--retries", "1", "--backoff", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("proas: error: cannot reach")
    assert proas_main(["react", *TOY, "--base-url", "ftp://x", "--model", "m"]) == 2


def test_server_errors_are_retried():
    state = {"n": 0}

    class Flaky(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            state["n"] += 1
            code, body = (503, {"error": {"message": "busy"}}) if state["n"] <= 2 else (
                200, {"choices": [{"message": {"role": "assistant", "content": "Thought: t\nAction: look"}}]})
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Flaky)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        waits = []
        client = ChatClient(f"http://127.0.0.1:{httpd.server_address[1]}/v1", "m", retries=2, backoff=0.1,
                            sleep=waits.append)
        assert client.chat([{"role": "user", "content": "x"}], 0.0) == "Thought: t\nAction: look"
        assert client.retried == 2 and waits == [0.1, 0.2]
        state["n"] = -10  # now always busy: the last error is named
        with pytest.raises(ProasError, match="HTTP 503: busy"):
            ChatClient(client.base_url, "m", retries=1, backoff=0.0).chat([{"role": "user", "content": "x"}], 0.0)
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_serve_an_lm_checkpoint(tmp_path):
    from proas.baselines.direct import direct_eval

    c = build_config([*TOY, "policy=lm", "policy.lm.model_config=tiny", "policy.lm.max_new_tokens=6",
                      "env.fixed_val_set.size=1"])
    direct_eval(c, tasks=1, save=tmp_path / "lm")
    server = PolicyServer(tmp_path / "lm", seed=0)
    assert server.model.startswith("proas-lm-")
    body = {"messages": [{"role": "user", "content": format_observation("You are at the door.", ["go to desk"],
                                                                          task="put the key on the bed")}],
            "temperature": 1.0, "seed": 5}
    out = server.complete(body)
    content = out["choices"][0]["message"]["content"]
    assert content.startswith("Thought: ") and "\nAction: " in content
    assert out["usage"]["total_tokens"] == out["usage"]["prompt_tokens"] + out["usage"]["completion_tokens"]
    assert server.complete(body)["choices"][0]["message"]["content"] == content  # same request seed, same reply


# --- the HTTP server under load and bad requests (issue 15) -------------------------------------

_OBS = format_observation("You are at the door.", ["go to desk", "go to bed"], task="put the key on the bed")


def _chat_body(**extra) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": _OBS}], "temperature": 0.0,
                       **extra}).encode()


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


def _read_answer(s: socket.socket) -> tuple[int, dict, bytes]:
    """``(status, headers, body)`` of one HTTP answer read from ``s``."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        assert chunk, f"connection closed without an answer: {buf!r}"
        buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    while len(body) < int(headers["content-length"]):
        chunk = s.recv(65536)
        assert chunk, "connection closed in the middle of the answer"
        body += chunk
    return int(lines[0].split()[1]), headers, body


def _raw(port: int, data: bytes, timeout: float = 10.0) -> tuple[int, dict, dict, bool]:
    """Send raw bytes; ``(status, headers, JSON body, closed)`` of the answer, ``closed`` when the
    server closed the connection after it."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        status, headers, body = _read_answer(s)
        try:
            closed = s.recv(1) == b""
        except (TimeoutError, socket.timeout):
            closed = False
        except ConnectionResetError:
            closed = True
    return status, headers, json.loads(body), closed


def _post(port: int, body: bytes, path: str = "/v1/chat/completions", method: str = "POST", timeout: float = 10.0):
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, json.loads(resp.read())
    finally:
        conn.close()


def _error_of(status, headers, body):
    assert headers["content-type"].startswith("application/json")
    assert body["error"]["code"] == status and body["error"]["message"]
    return body["error"]


def test_serve_answers_100_concurrent_clients_without_resets(served):
    from concurrent.futures import ThreadPoolExecutor

    _, url = served
    port, n = _port(url), 100
    barrier = threading.Barrier(n)

    def one(_):
        barrier.wait(timeout=30)
        try:
            return _post(port, _chat_body(), timeout=60)[0]
        except Exception as exc:  # noqa: BLE001 - a reset or a timeout is what this test counts
            return type(exc).__name__

    with ThreadPoolExecutor(n) as pool:
        outcomes = list(pool.map(one, range(n)))
    assert outcomes == [200] * n, {o: outcomes.count(o) for o in set(outcomes)}


def test_serve_413_on_an_oversize_body_before_reading_it(served, sft_run):
    server, url = served
    # a declared 50 MB body is refused from its header: nothing is read
    status, headers, body, closed = _raw(_port(url), b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                         b"Content-Type: application/json\r\nContent-Length: 50000000\r\n\r\n{")
    assert status == 413 and "larger than the limit of 1048576 bytes" in _error_of(status, headers, body)["message"]
    assert closed
    # a chunked body (no declared length) is refused once the bytes read pass the limit
    with Started(server, max_body=4096) as srv:
        chunk = b"x" * 1024
        data = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(6)) + b"0\r\n\r\n"
        status, headers, body, closed = _raw(srv.port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                             b"Content-Type: application/json\r\n"
                                             b"Transfer-Encoding: chunked\r\n\r\n" + data)
        assert status == 413 and "limit of 4096 bytes" in _error_of(status, headers, body)["message"] and closed
        assert _post(srv.port, _chat_body())[0] == 200  # a body under the limit is answered


def test_serve_400_json_on_deeply_nested_json(served):
    _, url = served
    deep = b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    status, headers, body = _post(_port(url), deep)
    assert status == 400
    assert "not valid JSON (recursion limit exceeded" in _error_of(status, headers, body)["message"]
    assert _post(_port(url), _chat_body())[0] == 200  # and the server goes on


@pytest.mark.parametrize("seed", [-1, 2**63, 2**70, 1.5, "3", True])
def test_serve_4xx_json_on_a_bad_seed(served, seed):
    _, url = served
    status, headers, body = _post(_port(url), _chat_body(seed=seed))
    assert status == 400 and _error_of(status, headers, body)["param"] == "seed"


def test_serve_accepts_the_seed_range_ends(served):
    _, url = served
    for seed in (0, 2**63 - 1):
        status, _, body = _post(_port(url), _chat_body(seed=seed))
        assert status == 200 and body["choices"][0]["message"]["content"].startswith("Thought: ")


def test_serve_405_and_404_json(served):
    _, url = served
    port = _port(url)
    for method, path in [("PUT", "/v1/chat/completions"), ("DELETE", "/v1/chat/completions"),
                         ("GET", "/v1/chat/completions"), ("POST", "/v1/models")]:
        status, headers, body = _post(port, b"{}", path=path, method=method)
        assert status == 405 and method in _error_of(status, headers, body)["message"]
        assert "allow" in headers
    status, headers, body = _post(port, b"{}", path="/v2/nothing")
    assert status == 404 and "/v2/nothing" in _error_of(status, headers, body)["message"]


def test_serve_answers_a_short_body_within_the_read_timeout(served):
    import time

    server, _ = served
    with Started(server, read_timeout=1.0, keep_alive=1.0) as srv:
        t0 = time.monotonic()
        # 100 bytes declared, 10 sent: answered 408 and closed instead of waiting forever
        status, headers, body, closed = _raw(srv.port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                             b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
                                             + b"{" * 10, timeout=10)
        assert status == 408 and "not received within 1 s" in _error_of(status, headers, body)["message"]
        assert closed and time.monotonic() - t0 < 5
        # headers that stall half-way: the connection is closed after the read timeout
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
            t0 = time.monotonic()
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            assert s.recv(1) == b"" and 0.5 < time.monotonic() - t0 < 5
        # and after a first answer on a keep-alive connection, too
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
            s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert _read_answer(s)[0] == 200
            t0 = time.monotonic()
            s.sendall(b"GET /v1/models HTTP/1.1\r\n")
            assert s.recv(1) == b"" and 0.5 < time.monotonic() - t0 < 5
        # an idle keep-alive connection is closed after --keep-alive seconds
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
            s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            t0 = time.monotonic()
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            assert data.startswith(b"HTTP/1.1 200") and time.monotonic() - t0 < 5


@pytest.mark.parametrize("payload,param", [
    ({}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": "hello"}, "messages"),
    ({"messages": [{"role": "tool", "content": _OBS}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": ["a"]}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": _OBS}], "temperature": 3}, "temperature"),
    ({"messages": [{"role": "user", "content": _OBS}], "temperature": -0.5}, "temperature"),
    ({"messages": [{"role": "user", "content": _OBS}], "temperature": "hot"}, "temperature"),
    ({"messages": [{"role": "user", "content": _OBS}], "n": 0}, "n"),
    ({"messages": [{"role": "user", "content": _OBS}], "n": 17}, "n"),
    ({"messages": [{"role": "user", "content": _OBS}], "max_tokens": 0}, "max_tokens"),
    ({"messages": [{"role": "user", "content": _OBS}], "stream": True}, "stream"),
    ({"messages": [{"role": "user", "content": _OBS}], "model": 7}, "model"),
    ({"messages": [{"role": "user", "content": "no format"}]}, "messages"),
    ([1, 2], None),
])
def test_serve_400_json_on_schema_errors(served, payload, param):
    _, url = served
    status, headers, body = _post(_port(url), json.dumps(payload).encode())
    assert status == 400 and _error_of(status, headers, body)["param"] == param


@pytest.mark.parametrize("raw", [b"", b"not json", b'{"messages": [', b"\xff\xfe"])
def test_serve_400_json_on_a_body_that_is_not_json(served, raw):
    _, url = served
    status, headers, body = _post(_port(url), raw)
    assert status == 400 and "request body" in _error_of(status, headers, body)["message"]


def test_serve_n_choices_and_max_tokens(served):
    _, url = served
    status, _, body = _post(_port(url), _chat_body(n=3, temperature=1.0, seed=4))
    assert status == 200 and [c["index"] for c in body["choices"]] == [0, 1, 2]
    assert all(parse_reply(c["message"]["content"])[1] in ("go to desk", "go to bed") for c in body["choices"])
    status, _, body = _post(_port(url), _chat_body(max_tokens=2))
    assert status == 200 and body["choices"][0]["message"]["content"] == "Thought: the"
    assert body["choices"][0]["finish_reason"] == "length" and body["usage"]["completion_tokens"] == 2


def test_serve_queue_overflow_is_503_json_and_the_queue_drains(served):
    import time

    server, _ = served
    gate = threading.Event()
    act = server.policy.act

    def blocked_act(*a, **k):
        gate.wait(timeout=30)
        return act(*a, **k)

    server.policy.act = blocked_act
    try:
        with Started(server, max_queue=1) as srv:
            queue = srv.httpd.app.state.queue
            results = []
            threads = [threading.Thread(target=lambda: results.append(_post(srv.port, _chat_body(), timeout=30)[0]))
                       for _ in range(2)]
            for t in threads:  # one running (blocked in the policy), one waiting
                t.start()
            deadline = time.monotonic() + 10
            while queue.admitted < 2 and time.monotonic() < deadline:
                time.sleep(0.02)
            status, headers, body = _post(srv.port, _chat_body())
            assert status == 503 and headers.get("retry-after") == "1"
            assert _error_of(status, headers, body)["type"] == "server_busy"
            gate.set()
            for t in threads:
                t.join(timeout=30)
            assert results == [200, 200] and queue.admitted == 0
    finally:
        gate.set()
        server.policy.act = act


def test_proas_serve_command_serves_and_stops_on_ctrl_c(sft_run):
    import os
    import re
    import signal
    import subprocess
    import sys
    import urllib.request

    paths = [os.path.dirname(os.path.dirname(__import__("proas").__file__)), os.path.dirname(__file__),
             os.environ.get("PYTHONPATH", "")]  # this proas, and the tests' toy_env
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    proc = subprocess.Popen([sys.executable, "-m", "proas", "serve", str(sft_run), "--port", "0",
                             "--model-name", "sft"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        m = re.search(r"at (http://127\.0\.0\.1:\d+/v1)", line)
        assert m, line + proc.stderr.read()
        with urllib.request.urlopen(f"{m.group(1)}/models", timeout=10) as resp:
            assert json.loads(resp.read())["data"][0]["id"] == "sft"
        assert _post(_port(m.group(1)), _chat_body())[0] == 200
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_500_json_when_the_policy_fails_and_goes_on(served):
    server, url = served
    act = server.policy.act

    def broken(*a, **k):
        raise RuntimeError("the policy broke")

    server.policy.act = broken
    try:
        status, headers, body = _post(_port(url), _chat_body())
        assert status == 500 and _error_of(status, headers, body) == {
            "message": "RuntimeError: the policy broke", "type": "server_error", "param": None, "code": 500}
    finally:
        server.policy.act = act
    assert _post(_port(url), _chat_body())[0] == 200
