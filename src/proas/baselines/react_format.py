"""The ReAct chat format shared by ``proas react`` (the client) and ``proas serve`` (the server).

A conversation is one episode. The system message explains the game; each user message carries
the environment's observation and, where the env has them, the admissible actions; each
assistant message answers with a thought and an action::

    user:      Task: put a clean apple on the table.
               Observation:
               <the env's text>

               Admissible actions:
               - go to countertop 1
               - ...
    assistant: Thought: <free text>
               Action: go to countertop 1

The first user message starts with the ``Task:`` line; later ones do not. Any OpenAI-compatible
model can follow this format from the system prompt; ``proas serve`` parses it back into the
``proas.policies.base.Context`` a proas policy acts on (``parse_conversation``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from proas.errors import ProasError

__all__ = ["ConversationState", "format_observation", "format_reply", "parse_conversation", "parse_reply",
           "system_prompt"]

_OBS_HEAD = "Observation:\n"
_ADM_HEAD = "\n\nAdmissible actions:\n"
_TASK_RE = re.compile(r"\ATask: (.*)\n")
_ACTION_LINE_RE = re.compile(r"^\s*Action\s*:\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)
_ACTION_TAG_RE = re.compile(r"<action>(.*?)</action>", re.IGNORECASE | re.DOTALL)
_THOUGHT_RE = re.compile(r"^\s*Thought\s*:\s*(.*?)(?=^\s*Action\s*:|\Z)", re.IGNORECASE | re.MULTILINE | re.DOTALL)

_INTRO = {
    "household": "You are an agent in a household (the ALFRED/ALFWorld text environment). Commands are "
                 "lower-case, e.g. 'go to countertop 1', 'take apple 1 from countertop 1', 'open fridge 1'.",
    "shop": "You are an agent shopping on a web store (the WebShop text environment). Actions are "
            "'search[keywords]' and 'click[button or item]'.",
}


def system_prompt(env_name: str) -> str:
    intro = _INTRO.get(env_name, "You are an agent acting in a text environment.")
    return (f"{intro}\nEach turn you get an observation (and, where the game has them, the admissible "
            "actions). Reply with exactly two lines:\nThought: <your reasoning>\nAction: <one action>\n"
            "Choose the action from the admissible actions when they are listed.")


def format_observation(observation: str, admissible: Sequence[str] | None, task: str | None = None) -> str:
    """The user message of one turn; ``task`` only on the first turn."""
    text = (f"Task: {task}\n" if task is not None else "") + _OBS_HEAD + observation
    if admissible is not None:
        text += _ADM_HEAD + "\n".join(f"- {a}" for a in admissible)
    return text


def format_reply(thought: str, action: str) -> str:
    return f"Thought: {' '.join(thought.split())}\nAction: {action}"


def parse_reply(text: str, env_name: str = "") -> tuple[str, str, bool]:
    """``(thought, action, malformed)`` of an assistant message.

    The action is the last ``Action:`` line (or the text of ``<action>...</action>``). A reply
    without an action is malformed; its action is then its last line, which the env rejects.
    Household commands are lower-case, so household actions are lower-cased.
    """
    lines = _ACTION_LINE_RE.findall(text)
    tag = _ACTION_TAG_RE.search(text)
    if lines:
        action, malformed = lines[-1], False
    elif tag and tag.group(1).strip():
        action, malformed = tag.group(1).strip(), False
    else:
        stripped = text.strip().splitlines()
        action, malformed = (stripped[-1].strip() if stripped else ""), True
    m = _THOUGHT_RE.search(text)
    thought = m.group(1).strip() if m else ""
    if env_name == "household":
        action = action.lower()
    return thought, action, malformed


@dataclass
class ConversationState:
    """A conversation parsed back into what a policy needs for its next step."""

    task: str
    observation: str
    admissible: list[str] | None
    history: list[tuple[str, str]]
    step: int


def _split_user(text: str, where: str) -> tuple[str | None, str, list[str] | None]:
    task = None
    m = _TASK_RE.match(text)
    if m:
        task = m.group(1).strip()
        text = text[m.end():]
    if not text.startswith(_OBS_HEAD):
        raise ProasError(f"{where}: a user message must start with 'Observation:' (the proas ReAct format)")
    body = text[len(_OBS_HEAD):]
    admissible = None
    if _ADM_HEAD in body:
        body, _, adm = body.rpartition(_ADM_HEAD)
        admissible = [line[2:] for line in adm.split("\n") if line.startswith("- ")]
    return task, body, admissible


def parse_conversation(messages: Any) -> ConversationState:
    """Rebuild the episode from an OpenAI ``messages`` list in the format above.

    Raises ``ProasError`` (the server answers 400) when the list does not follow the format.
    """
    if not isinstance(messages, list) or not messages:
        raise ProasError("'messages' must be a non-empty list")
    turns = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise ProasError(f"messages[{i}] must be an object with string 'role' and 'content'")
        if m["role"] != "system":
            turns.append((i, m["role"], m["content"]))
    if not turns or turns[-1][1] != "user":
        raise ProasError("the last message must be the user's observation")
    task: str | None = None
    history: list[tuple[str, str]] = []
    pending: str | None = None
    observation, admissible = "", None
    for i, role, content in turns:
        if role == "user":
            if pending is not None:
                raise ProasError(f"messages[{i}]: two user messages without an assistant reply between them")
            t, observation, admissible = _split_user(content, f"messages[{i}]")
            if task is None:
                task = t
            pending = observation
        elif role == "assistant":
            if pending is None:
                raise ProasError(f"messages[{i}]: an assistant message must answer a user message")
            history.append((pending, parse_reply(content)[1]))
            pending = None
        else:
            raise ProasError(f"messages[{i}]: unsupported role {role!r}")
    if task is None:
        raise ProasError("the first user message must start with 'Task: ...'")
    return ConversationState(task=task, observation=observation, admissible=admissible, history=history,
                             step=len(history))
