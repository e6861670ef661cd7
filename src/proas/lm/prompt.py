"""The ``lm`` policy's prompt and answer format: the user message of one step
(``build_prompt``), the projection of an answer to an action (``project_action``), the response
text score mode scores (``score_response``), and fitting a prompt into the token budget
(``PromptMixin``)."""

from __future__ import annotations

import re
from dataclasses import replace

from proas.errors import ProasError
from proas.policies.base import Context

#: the thought SFT teaches before the oracle action, and the one every scored candidate carries
LM_THOUGHT = "I will take the next step towards the goal."

def score_response(action: str) -> str:
    """The response text whose likelihood scores ``action`` in score mode (SFT's target text)."""
    return f"<think>{LM_THOUGHT}</think><action>{action}</action>"

_CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_ENV_INTRO = {
    "household": "You are an expert agent acting in a household (the ALFRED embodied environment).",
    "shop": "You are an expert agent shopping on a web store (the WebShop environment).",
}

_ACTION_RE = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)

_THINK_RE = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)

def build_prompt(ctx: Context, history_length: int = 2) -> str:
    """The user message for one step (verl-agent's template structure, our wording)."""
    intro = _ENV_INTRO.get(ctx.env_name, "You are an expert agent acting in a text environment.")
    parts = [intro, f"Your task is to: {ctx.task}"]
    recent = ctx.history[-history_length:] if history_length > 0 else []
    if recent:
        first = len(ctx.history) - len(recent) + 1
        lines = [f"[Observation {first + k}: '{o}', Action {first + k}: '{a}']" for k, (o, a) in enumerate(recent)]
        parts.append(
            f"You have taken {ctx.step} step(s) so far. Your last {len(recent)} observation(s) and the action(s) "
            "you took:\n" + "\n".join(lines)
        )
    parts.append(f"You are now at step {ctx.step + 1}. Current observation: {ctx.observation}")
    if ctx.admissible is not None:
        parts.append("Admissible actions now: [" + ", ".join(f"'{a}'" for a in ctx.admissible if a != "help") + "].")
    parts.append(
        "Think about the situation step by step inside <think> </think> tags, then give exactly one "
        "action inside <action> </action> tags."
    )
    return "\n\n".join(parts)

def project_action(response: str, env_name: str = "") -> tuple[str, bool]:
    """Map a response to ``(action, malformed)``.

    The action is the stripped text inside the first ``<action>...</action>``; the response is
    malformed when that pair or a ``<think>...</think>`` pair is missing. A malformed response
    becomes the last 30 characters of the text (verl-agent's fallback), which the env rejects.
    Household commands are lower-case, so its actions are lower-cased.
    """
    m = _ACTION_RE.search(response)
    if m:
        action = m.group(1).strip()
        malformed = _THINK_RE.search(response) is None or not action
    else:
        action = response.strip()[-30:]
        malformed = True
    if env_name == "household":
        action = action.lower()
    return action, malformed


class PromptMixin:
    """``LMPolicy``'s prompt encoding: the chat-template ids of a step, trimmed to
    ``max_prompt_tokens`` (reads ``tokenizer``, ``history_length``, ``max_prompt_tokens`` and the
    memo ``_prompt_memo``, a dict from a user message to its ids)."""

    def _chat_ids(self, ctx: Context, history_length: int) -> list[int]:
        """The chat-template ids of the step's user message, memoised by the message: the
        episodes of a group share their first prompt, and a policy that has learnt a task
        repeats its states, so a turn's prompts often repeat (a new list each call: callers
        may extend it)."""
        content = build_prompt(ctx, history_length)
        memo = self._prompt_memo
        ids = memo.get(content)
        if ids is None:
            if len(memo) >= 50_000:
                memo.clear()
            text = self.tokenizer.apply_chat_template([{"role": "user", "content": content}],
                                                      tokenize=False, add_generation_prompt=True)
            ids = memo[content] = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return list(ids)

    def encode_prompt(self, ctx: Context, reserve: int = 0) -> list[int]:
        """The prompt's token ids within ``max_prompt_tokens - reserve`` (see ``fit_prompt``)."""
        return self.fit_prompt(ctx, reserve)[0]

    def fit_prompt(self, ctx: Context, reserve: int = 0) -> tuple[list[int], bool]:
        """``(prompt ids, trimmed)``: the prompt within ``max_prompt_tokens - reserve`` tokens.

        An over-long prompt loses, in this order, the oldest shown history pairs, one at a time,
        then the middle of the current observation, replaced by ``[... N tokens cut ...]`` (its
        start says where the agent is, its end often holds what just happened). The task, the
        admissible actions and the answer-format instruction are never cut: a prompt whose other
        parts alone exceed the budget is a ``ProasError`` naming the key to raise.
        """
        budget = self.max_prompt_tokens - reserve
        shown = min(self.history_length, len(ctx.history))
        ids = self._chat_ids(ctx, shown)
        if len(ids) <= budget:
            return ids, False
        while shown > 0:
            shown -= 1
            ids = self._chat_ids(ctx, shown)
            if len(ids) <= budget:
                return ids, True
        obs = self.tokenizer(ctx.observation, add_special_tokens=False)["input_ids"]
        need = len(ids) - budget  # observation tokens that must go, before the marker's own
        for _ in range(8):  # re-encoding the joined text can merge tokens differently: retry
            cut = need + len(self.tokenizer(f" [... {need} tokens cut ...] ", add_special_tokens=False)["input_ids"])
            keep = len(obs) - cut
            if keep < 0:
                break
            head = (keep + 1) // 2
            text = (self.tokenizer.decode(obs[:head]) + f" [... {cut} tokens cut ...] "
                    + self.tokenizer.decode(obs[len(obs) - (keep - head):]))
            ids = self._chat_ids(replace(ctx, observation=text), 0)
            if len(ids) <= budget:
                return ids, True
            need += len(ids) - budget
        fixed = len(self._chat_ids(replace(ctx, observation=""), 0))
        raise ProasError(f"policy.lm.max_prompt_tokens={self.max_prompt_tokens}: the task, admissible actions "
                         f"and instructions alone take {fixed} tokens (+{reserve} of the scored response); "
                         "raise it")
