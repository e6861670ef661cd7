"""``proas react``: a ReAct agent (a thought and an action per turn) over an OpenAI-compatible
chat endpoint, on the validation set of an env.

Each validation task is one conversation in the format of ``proas.baselines.react_format``: the
system prompt, then per turn the observation (and admissible actions) as the user's message and
the model's ``Thought: ... / Action: ...`` reply; the action goes to the env. A reply without an
action counts as a malformed step (an env error), as in the RL rollouts. Episodes end when the
env says done or after the env's step limit.

HTTP: ``POST {base_url}/chat/completions`` with the standard library's ``urllib``. Connection
failures, timeouts, HTTP 429 and 5xx are retried with exponential backoff (``backoff * 2**k``
seconds, ``retries`` times); when the endpoint still cannot be reached, or answers another
error, the run stops with one line saying so (``ProasError``).
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from proas.baselines.react_format import format_observation, parse_reply, system_prompt
from proas.envs.base import SUCCESS_REWARD, Env
from proas.envs.replay import env_step
from proas.errors import ProasError
from proas.policies.base import task_text
from proas.types import Step, Trajectory

__all__ = ["ChatClient", "run_react"]


@dataclass
class ChatClient:
    """A minimal OpenAI-compatible chat client with retries."""

    base_url: str
    model: str
    timeout: float = 60.0
    retries: int = 4
    backoff: float = 0.5
    api_key: str | None = None
    sleep: Callable[[float], None] = time.sleep

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ProasError(f"--base-url {self.base_url!r}: expected http://host:port/v1")
        self.base_url = self.base_url.rstrip("/")
        self.calls = 0
        self.retried = 0

    def chat(self, messages: list[dict[str, str]], temperature: float, seed: int | None = None) -> str:
        """The assistant's reply text for ``messages``."""
        body: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": temperature}
        if seed is not None:
            body["seed"] = seed
        data = json.dumps(body).encode()
        url = f"{self.base_url}/chat/completions"
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                self.retried += 1
                self.sleep(self.backoff * 2 ** (attempt - 1))
            self.calls += 1
            req = urllib.request.Request(url, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    payload = json.loads(resp.read())
            except urllib.error.HTTPError as exc:
                detail = _error_message(exc)
                if exc.code == 429 or exc.code >= 500:
                    last = f"HTTP {exc.code}: {detail}"
                    continue
                raise ProasError(f"{url}: HTTP {exc.code}: {detail}") from None
            except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
                reason = getattr(exc, "reason", exc)
                last = f"{type(reason).__name__}: {reason}" if not isinstance(reason, str) else reason
                continue
            except ValueError:
                raise ProasError(f"{url}: the answer is not JSON") from None
            try:
                content = payload["choices"][0]["message"]["content"]
            except (KeyError, IndexError, TypeError):
                raise ProasError(
                    f"{url}: the answer is not a chat completion (no choices[0].message.content)"
                ) from None
            return content if isinstance(content, str) else ""
        raise ProasError(f"cannot reach the chat endpoint {url} after {self.retries + 1} attempts ({last})")


def _error_message(exc: urllib.error.HTTPError) -> str:
    try:
        obj = json.loads(exc.read())
        return str(obj["error"]["message"])
    except Exception:  # noqa: BLE001 - any body: fall back to the reason
        return str(exc.reason)


def api_key_from_env(var: str | None) -> str | None:
    if not var:
        return None
    key = os.environ.get(var)
    if not key:
        raise ProasError(f"--api-key-env {var}: the variable is not set")
    return key


def run_react(client: ChatClient, env: Env, task_ids: Sequence[str], *, env_name: str, max_steps: int,
              temperature: float = 0.0, seed: int | None = None, success_reward: float = SUCCESS_REWARD,
              on_episode: Callable[[Trajectory], None] | None = None) -> list[Trajectory]:
    """Play each task as one ReAct conversation; return the trajectories (``proas.types``).

    A step's ``extra`` holds the model's ``reply`` and ``thought``; ``malformed`` replies are
    recorded as errors.
    """
    out = []
    sys_msg = {"role": "system", "content": system_prompt(env_name)}
    for k, tid in enumerate(task_ids):
        obs, info = env.reset(tid)
        task = task_text(obs, info)
        messages = [sys_msg, {"role": "user", "content": format_observation(obs, info.get("admissible"), task)}]
        steps: list[Step] = []
        won, score = False, 0.0
        for t in range(max_steps):
            reply = client.chat(messages, temperature, None if seed is None else seed + 1000 * k + t)
            thought, action, malformed = parse_reply(reply, env_name)
            nobs, _, terminated, truncated, ninfo = env.step(action)
            done = terminated or truncated
            won = bool(ninfo.get("won"))
            score = float(ninfo.get("score", 0.0))
            steps.append(env_step(info, action, ninfo, reward=success_reward if won else 0.0, malformed=malformed,
                                  obs=obs, extra={"reply": reply, "thought": thought, "malformed": malformed}))
            messages.append({"role": "assistant", "content": reply})
            messages.append({"role": "user", "content": format_observation(nobs, ninfo.get("admissible"))})
            obs, info = nobs, ninfo
            if done or won:
                break
        traj = Trajectory(group=f"react-{k}", trajectory=f"react-{k}", reward=success_reward if won else 0.0,
                          steps=steps, task_type=info.get("task_type"), won=won,
                          extra={"task_id": tid, "score": score})
        out.append(traj)
        if on_episode is not None:
            on_episode(traj)
    return out
