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
    for bad, msg in [([], "non-empty"), ([{"role": "user", "content": "hello"}], "Observation"),
                     (msgs[:3], "last message"), ([msgs[3]], "Task"),
                     (msgs[:2] + [msgs[3]], "two user messages"), ([{"role": "tool", "content": "x"}] + msgs[1:2], "role")]:
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
        obs, _, done, info = env.step(a)
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
    assert "role" in json.loads(err.value.read())["error"]["message"]
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
