"""How long `proas serve` takes to parse a request body, on the worst bodies up to its 1 MiB limit.

    python benchmarks/react_parse.py [--repeats 5]
    python benchmarks/react_parse.py --quick        # 1 repeat: what CI runs

The bodies are the shapes that make backtracking patterns quadratic (issue #27, item 1: the
earlier parser took 10-15 s on 78 KiB of newlines): one message of a MiB made of runs of blanks,
repeated heads and tags (``Action:``, ``<action>``, ...) or their prefixes, or one long line, as
the reply, the observation or the system message; as many small turns as fit; an admissible
section of a MiB of lines; deeply nested JSON; a string of escapes. Each is parsed as the server
parses it (``parse_request``: JSON validation and the conversation), and ``parse_reply`` is timed
alone on the same texts.

Printed, for each body: its size, the parse time (the best of ``--repeats``), and the time of
``json.loads`` of the same body measured in the same run (the one pass over the body any JSON
server makes: the reference, which makes the ratio comparable across machines); then the worst
parse time against the target (any body up to the limit in under 50 ms) and the worst ratio.
Measured on the project's 2-core machine: docs/baselines.md. The timing is here and not in a unit
test: tests/test_react_parse_work.py counts the work (linear in the text), which no machine's
load can fool. Exits 1 when a body is neither parsed nor refused with a 400.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from proas.baselines.react_format import format_observation, parse_reply
from proas.baselines.serve import PolicyServer, PreparedRequest, ServeLimits, _HTTPError, parse_request

LIMIT = ServeLimits().max_body  # bytes of a request body: 1 MiB
TARGET_MS = 50.0

HEADS = ["Action:", "action :", "<action>", "</action>", "Thought:", "<think>", "Task: ", "Observation:\n",
         "\n\nAdmissible actions:\n", "- "]
BLANKS = ["\n", " ", "\r\n", "\u2028", "\x0b"]


def _fill(unit: str, size: int = LIMIT, head: str = "", tail: str = "") -> str:
    """``head`` + ``unit`` repeated + ``tail``, about ``size`` characters."""
    return head + unit * max(1, (size - len(head) - len(tail)) // max(1, len(unit))) + tail


def texts() -> dict[str, str]:
    out = {f"run of {b!r}": _fill(b) for b in BLANKS}
    for h in HEADS:
        out[f"repeated {h!r}"] = _fill(h)
        out[f"prefixes of {h!r}"] = _fill("".join(h[:k] for k in range(1, len(h) + 1)))
        out[f"{h!r} + newline, repeated"] = _fill(h + "\n")
        out[f"{h!r} then newlines"] = _fill("\n", head=h)
        out[f"{h!r} then spaces then x"] = _fill(" ", head=h, tail="x")
    out["long line"] = _fill("x")
    out["action lines with long trailing blanks"] = _fill("Action: a" + " " * 1000 + "\n")
    out["thought then action heads"] = _fill("Thought: t\nAction:\n")
    return out


class _TextOnly(PolicyServer):
    """``PolicyServer.prepare`` without a checkpoint: request text to a policy's context."""

    def __init__(self):
        self.env_name = "household"


_OBS = format_observation("You are at the door.", ["go to desk", "go to bed"], task="put the key on the bed")


def _body(messages: list[dict], ascii: bool = True) -> bytes:
    return json.dumps({"model": "m", "messages": messages}, ensure_ascii=ascii).encode()


def _fit(build, text: str) -> bytes:
    """``build(text)`` with ``text`` cut until the body fits the limit (JSON escapes vary in length)."""
    body = build(text)
    while len(body) > LIMIT:
        text = text[: int(len(text) * min(0.999, LIMIT / len(body)))]
        body = build(text)
    return body


def _one_big_message(text: str, role: str) -> bytes:
    if role == "assistant":
        return _fit(lambda t: _body([{"role": "user", "content": _OBS}, {"role": "assistant", "content": t},
                                     {"role": "user", "content": "Observation:\nx"}]), text)
    if role == "user":  # the observation, the admissible section and a task line
        return _fit(lambda t: _body([{"role": "user", "content": f"Task: {t[:100]}\nObservation:\n{t}\n\n"
                                                                 f"Admissible actions:\n{t}"}]), text)
    return _fit(lambda t: _body([{"role": "system", "content": t}, {"role": "user", "content": _OBS}]), text)


def _many_messages(user: str, assistant: str) -> bytes:
    """As many small turns as fit the limit."""
    turn = [{"role": "assistant", "content": assistant}, {"role": "user", "content": user}]
    k = (LIMIT - len(_body([{"role": "user", "content": _OBS}]))) // (len(json.dumps(turn)) - 1)
    body = _body([{"role": "user", "content": _OBS}] + turn * k)
    while len(body) > LIMIT:
        k -= 1
        body = _body([{"role": "user", "content": _OBS}] + turn * k)
    return body


def bodies(all_texts: dict[str, str]) -> dict[str, bytes]:
    out = {}
    for name, text in all_texts.items():
        for role in ("assistant", "user", "system"):
            out[f"{role}: {name}"] = _one_big_message(text, role)
    out["many empty turns"] = _many_messages("Observation:\n", "")
    out["many turns with actions"] = _many_messages("Observation:\nx\n\nAdmissible actions:\n- a", "Action: a")
    out["many malformed replies"] = _many_messages("Observation:\n\n", "\n\n")
    for unit in ("- go to desk 1\n", "- \n", "-\n"):
        out[f"admissible section of {unit!r} lines"] = _fit(lambda t: _body([{
            "role": "user", "content": "Task: t\nObservation:\nx\n\nAdmissible actions:\n" + t}]), unit * LIMIT)
    out["many short non-ASCII words"] = _fit(lambda t: _body([{"role": "user", "content": t}, {
        "role": "assistant", "content": t}, {"role": "user", "content": "Observation:\n" + t}], ascii=False),
        "Task: t\nObservation:\n" + "\u4e00 " * LIMIT)
    out["deeply nested JSON"] = b'{"messages": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    out["one huge JSON string of escapes"] = _one_big_message("\\" * LIMIT, "assistant")
    return out


def _best(fn, arg, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(arg)
        best = min(best, time.perf_counter() - t0)
    return best


def _parse(body: bytes):
    try:
        return parse_request(_TextOnly(), body)
    except _HTTPError as exc:
        return exc


def _json(body: bytes):
    try:
        return json.loads(body)
    except (ValueError, RecursionError):  # nested deeper than the parser goes
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5, help="timed calls per body; the best counts (default 5)")
    ap.add_argument("--quick", action="store_true", help="1 repeat: a smoke run for CI")
    args = ap.parse_args()
    repeats = 1 if args.quick else max(1, args.repeats)
    all_texts = texts()
    all_bodies = bodies(all_texts)
    bad = []
    rows = []
    for name, body in all_bodies.items():
        out = _parse(body)
        if not (isinstance(out, PreparedRequest) or (isinstance(out, _HTTPError) and out.status == 400)):
            bad.append(name)
        rows.append((name, len(body), _best(_parse, body, repeats), _best(_json, body, repeats)))
    width = max(len(r[0]) for r in rows)
    print(f"{'body (up to the limit of %d bytes)' % LIMIT:<{width}}  {'bytes':>8}  {'parse ms':>8}  "
          f"{'json ms':>8}  {'ratio':>6}")
    for name, size, t, ref in rows:
        print(f"{name:<{width}}  {size:>8}  {1000 * t:8.1f}  {1000 * ref:8.1f}  {t / ref:6.1f}")
    reply = [(name, _best(parse_reply, text, repeats)) for name, text in all_texts.items()]
    worst = max(rows, key=lambda r: r[2])
    worst_ratio = max(rows, key=lambda r: r[2] / r[3])
    worst_reply = max(reply, key=lambda r: r[1])
    print(f"\n{len(rows)} bodies, best of {repeats}: worst parse {1000 * worst[2]:.1f} ms ({worst[0]}); target "
          f"< {TARGET_MS:.0f} ms for any body up to the limit: {'met' if 1000 * worst[2] < TARGET_MS else 'MISSED'}")
    print(f"worst parse time / json.loads time of the same body: {worst_ratio[2] / worst_ratio[3]:.1f} "
          f"({worst_ratio[0]})")
    ratios = sorted(t / ref for _, _, t, ref in rows)
    print(f"median of that ratio: {ratios[len(ratios) // 2]:.1f}; machine: {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f} (a loaded machine stretches every time, the reference's too)")
    print(f"parse_reply alone on {len(reply)} texts of about {LIMIT} characters: worst "
          f"{1000 * worst_reply[1]:.1f} ms ({worst_reply[0]})")
    if bad:
        print(f"neither parsed nor refused with 400: {bad}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
