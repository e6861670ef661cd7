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

Parsing takes time linear in the text: ``proas serve`` parses request bodies of up to a MiB, and
a pattern that backtracks (``^\\s*Action`` over a run of newlines) would hold the server for
seconds. So a line head (``Action:``, ``Thought:``) is matched at line starts only, its leading
blanks are those of its own line (a run of blank lines is never scanned again from each of its
line starts), a repeat is followed only by a single character that cannot be part of it or by
nothing that can fail, the ``<action>`` tags are literals, and the rest is string methods.
tests/test_react_parse_work.py counts the work of every pattern of this module and of
``proas.baselines.serve`` on pathological texts (linear: 4 times the text, 4 times the work);
benchmarks/react_parse.py times request bodies of a MiB.
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
_TASK_HEAD = "Task: "
# Line heads (MULTILINE ``^``). The leading blanks are ``[^\S\n]``, those of one line: with ``\s``
# every line start of a run of blank lines would scan the rest of the run again (quadratic).
_ACTION_LINE = re.compile(r"(?m)^[^\S\n]*(?i:action)\s*:\s*([^\n]*)")  # group: the value's line
_ACTION_HEAD = re.compile(r"(?m)^[^\S\n]*(?i:action)\s*:")
_THOUGHT_HEAD = re.compile(r"(?m)^[^\S\n]*(?i:thought)\s*:\s*")
# an admissible action's line ("- go to desk 1"): its text
_ADMISSIBLE_LINE = re.compile(r"(?m)^- ([^\n]*)")
# literals: one pass over the text each
_ACTION_OPEN = re.compile(r"(?i:<action>)")
_ACTION_CLOSE = re.compile(r"(?i:</action>)")
# the separators of ``str.splitlines``: the malformed fallback's "last line"
_LINE_BREAKS = ("\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")

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

    The action is the last ``Action:`` line (the text after the colon; when that is blank, the
    next non-blank line, which then counts as that action and nothing else), or else the text of
    the first ``<action>...</action>``. A reply without an action is malformed; its action is then
    its last line, which the env rejects. The thought runs from the first ``Thought:`` line to
    the next ``Action:`` line. ``Action:`` and ``Thought:`` count at the start of a line (after
    blanks), in any case. Household commands are lower-case, so household actions are
    lower-cased. Time linear in ``len(text)``.
    """
    action, malformed = _reply_action(text)
    if env_name == "household":
        action = action.lower()
    return _reply_thought(text), action, malformed


def _reply_action(text: str) -> tuple[str, bool]:
    """``(action, malformed)`` of a reply (see ``parse_reply``)."""
    values = _ACTION_LINE.findall(text)
    if values and not values[-1].strip():  # ``Action:`` and nothing after it but blanks
        values.pop()
    if values:
        return values[-1].strip(), False
    opened = _ACTION_OPEN.search(text)
    if opened is not None:
        closed = _ACTION_CLOSE.search(text, opened.end())
        if closed is not None and text[opened.end():closed.start()].strip():
            return text[opened.end():closed.start()].strip(), False
    stripped = text.strip()
    if not stripped:
        return "", True
    return stripped[max(map(stripped.rfind, _LINE_BREAKS)) + 1:].strip(), True


def _reply_thought(text: str) -> str:
    head = _THOUGHT_HEAD.search(text)
    if head is None:
        return ""
    end = _ACTION_HEAD.search(text, head.end())
    return text[head.end():len(text) if end is None else end.start()].strip()


@dataclass
class ConversationState:
    """A conversation parsed back into what a policy needs for its next step."""

    task: str
    observation: str
    admissible: list[str] | None
    history: list[tuple[str, str]]
    step: int


def _split_user(text: str, i: int) -> tuple[str | None, str, str | None]:
    """``(task, observation, admissible section)`` of a user message; the section is the text
    after the last ``Admissible actions:`` head (``_admissible`` reads it), or None."""
    task = None
    if text.startswith(_TASK_HEAD) and "\n" in text:
        line, _, text = text.partition("\n")
        task = line[len(_TASK_HEAD):].strip()
    if not text.startswith(_OBS_HEAD):
        raise ProasError(f"messages[{i}]: a user message must start with 'Observation:' (the proas ReAct format)")
    body = text[len(_OBS_HEAD):]
    k = body.rfind(_ADM_HEAD)
    if k < 0:
        return task, body, None
    return task, body[:k], body[k + len(_ADM_HEAD):]


def _admissible(section: str | None) -> list[str] | None:
    """The ``- `` lines of an admissible section, without their ``- ``."""
    return None if section is None else _ADMISSIBLE_LINE.findall(section)


def parse_conversation(messages: Any) -> ConversationState:
    """Rebuild the episode from an OpenAI ``messages`` list in the format above.

    Raises ``ProasError`` (the server answers 400) when the list does not follow the format.
    Time linear in the total length of the messages.
    """
    if not isinstance(messages, list) or not messages:
        raise ProasError("'messages' must be a non-empty list")
    last_role = None
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise ProasError(f"messages[{i}] must be an object with string 'role' and 'content'")
        if m["role"] != "system":
            last_role = m["role"]
    if last_role != "user":
        raise ProasError("the last message must be the user's observation")
    task: str | None = None
    history: list[tuple[str, str]] = []
    pending: str | None = None
    section: str | None = None
    for i, m in enumerate(messages):
        role, content = m["role"], m["content"]
        if role == "user":
            if pending is not None:
                raise ProasError(f"messages[{i}]: two user messages without an assistant reply between them")
            t, pending, section = _split_user(content, i)
            if task is None:
                task = t
        elif role == "assistant":
            if pending is None:
                raise ProasError(f"messages[{i}]: an assistant message must answer a user message")
            history.append((pending, _reply_action(content)[0]))  # the thought is not needed
            pending = None
        elif role != "system":
            raise ProasError(f"messages[{i}]: unsupported role {role!r}")
    if task is None:
        raise ProasError("the first user message must start with 'Task: ...'")
    assert pending is not None  # the last message is the user's
    return ConversationState(task=task, observation=pending, admissible=_admissible(section), history=history,
                             step=len(history))
