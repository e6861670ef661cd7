"""The one interface every policy implements, and the per-step context it acts on.

A policy sees a batch of ``Context`` objects (one per live environment), returns one
``Decision`` each, and later, for the loss, re-evaluates the recorded decisions with gradients:
``evaluate`` returns per-token log-probs and entropies as ``(batch, length)`` tensors with a
mask. The ``lm`` policy's tokens are its response tokens; the ``scorer`` policy has a single
"token" per step, the chosen candidate. The losses in ``proas.train.losses`` therefore treat
both the same way (verl's ``response_mask`` convention).
"""

from __future__ import annotations

import abc
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

__all__ = ["HF_FILES", "POLICY_FILES", "Context", "Decision", "Policy", "TokenStats", "candidate_actions",
           "task_text"]

_TASK_RE = re.compile(r"your task is to:\s*(.+?)(?:\n|$)", re.IGNORECASE)


def task_text(first_observation: str, info: dict[str, Any]) -> str:
    """The task description of an episode.

    ``info['task']`` when the env reports it; else ALFWorld's ``Your task is to: ...`` line;
    else WebShop's instruction (the part after ``Instruction: [SEP]``); else the first
    observation itself.
    """
    task = info.get("task")
    if isinstance(task, str) and task:
        return task
    m = _TASK_RE.search(first_observation)
    if m:
        return m.group(1).strip()
    parts = [p.strip() for p in first_observation.split("[SEP]")]
    if "Instruction:" in parts:
        i = parts.index("Instruction:")
        if i + 1 < len(parts):
            return parts[i + 1]
    return first_observation


@dataclass(slots=True)  # one per decision: no per-instance __dict__
class Context:
    """What a policy knows before step ``t`` of one episode.

    Attributes:
        env_name: the env's short name (selects the prompt template of the ``lm`` policy).
        task: the task description.
        observation: the current observation text.
        history: every earlier ``(observation, action)`` pair of the episode, oldest first.
        admissible: the commands the env accepts now, or None where the env has none.
        invalid_candidates: plausible commands the env would reject now (may be empty).
        step: ``t``, the number of actions taken so far.
    """

    env_name: str
    task: str
    observation: str
    history: list[tuple[str, str]]
    admissible: list[str] | None
    invalid_candidates: list[str]
    step: int


def candidate_actions(ctx: Context, policy: str = "scorer") -> list[str]:
    """The actions a candidate-choosing policy picks from: the admissible commands, then the
    invalid candidates (so that it can make the mistakes ProAS is about), each once, in order.

    Raises ``ProasError`` for an env without admissible actions or with no candidate at all.
    """
    from proas.errors import ProasError

    if ctx.admissible is None:
        raise ProasError(
            f"the {policy} policy needs an env that lists admissible actions; {ctx.env_name!r} "
            "does not (use policy=lm with policy.lm.mode=generate)"
        )
    seen = dict.fromkeys(list(ctx.admissible) + list(ctx.invalid_candidates))
    if not seen:
        raise ProasError(f"env {ctx.env_name!r} offered no candidate action at step {ctx.step}")
    return list(seen)


@dataclass(slots=True)  # one per decision: no per-instance __dict__
class Decision:
    """A policy's choice for one context.

    Attributes:
        action: the command sent to the env (projected from the response for the ``lm`` policy).
        response: the raw output (the ``lm`` policy's text; the action itself for ``scorer``).
        malformed: the response could not be parsed into an action (flagged as an env error).
        logp: the summed log-probability of the response under the acting policy.
        data: what ``evaluate`` needs to recompute the log-probs (token ids, feature ids).
    """

    action: str
    response: str
    malformed: bool
    logp: float
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class TokenStats:
    """Per-token log-probs and entropies of a batch of decisions, shape ``(batch, length)``."""

    logp: torch.Tensor
    entropy: torch.Tensor
    mask: torch.Tensor


#: the checkpoint state entry that says where the policy's weights are when not in ``policy``
POLICY_FILES = "policy_files"
#: ``POLICY_FILES``'s value: a Hugging Face model directory (``save_pretrained``) beside the state
HF_FILES = "huggingface"


class Policy(abc.ABC):
    """A trainable policy; ``module`` holds every trainable parameter."""

    kind: str = ""
    module: torch.nn.Module
    #: ``Decision.logp`` equals what ``evaluate`` returns for the same weights, so the trainer
    #: may use it as PPO's old log-prob (one-token responses only)
    exact_rollout_logp: bool = False

    @abc.abstractmethod
    def act(
        self,
        contexts: Sequence[Context],
        rng: np.random.Generator,
        temperature: float = 1.0,
    ) -> list[Decision]:
        """Choose one decision per context, sampling with ``temperature`` (0 = greedy)."""

    def prepare(self, data: Sequence[dict[str, Any]]) -> Any:
        """Pack recorded decisions' data into the batch ``evaluate`` takes (done once per batch,
        reused for the policy and its frozen reference)."""
        return list(data)

    def preparer(self, data: Sequence[dict[str, Any]]) -> Callable[[Sequence[int]], Any]:
        """``prepare`` for many batches of the same decisions (the update's minibatches): a
        function of the positions in ``data`` of one batch's decisions, in batch order, that
        returns what ``prepare([data[i] for i in positions])`` returns. A policy may pack
        ``data`` once here so that each batch is only gathered."""
        return lambda positions: self.prepare([data[i] for i in positions])

    def micro_batches(self, data: Sequence[dict[str, Any]], limit: int) -> list[list[int]]:
        """Split recorded decisions into the index groups one forward pass takes, every
        decision in exactly one: here consecutive runs of at most ``limit`` (a policy whose cost
        varies per decision bounds it too, and may group them in another order)."""
        return [list(range(i, min(i + limit, len(data)))) for i in range(0, len(data), limit)]

    @abc.abstractmethod
    def evaluate(self, batch: Any, module: torch.nn.Module | None = None) -> TokenStats:
        """Log-probs and entropies of a ``prepare``d batch, with gradients through ``module``
        (default: this policy's own; pass a frozen copy to score under the reference policy)."""

    def reference_module(self) -> torch.nn.Module:
        """A frozen copy of the current weights, for the KL term."""
        import copy

        ref = copy.deepcopy(self.module)
        ref.requires_grad_(False)
        ref.eval()
        return ref

    def make_optimizer(self, lr: float) -> torch.optim.Optimizer:
        """The optimiser of this policy's parameters (Adam unless a policy knows better)."""
        return torch.optim.Adam(self.parameters(), lr=lr, foreach=True)

    def make_scheduler(self, optimizer: torch.optim.Optimizer, total_steps: int):
        """The learning-rate schedule over ``total_steps`` steps, or None: a constant rate (the
        ``lm`` has warmup and schedules, ``LMPolicy.make_scheduler``)."""
        return None

    def parameters(self):
        return [p for p in self.module.parameters() if p.requires_grad]

    def state_dict(self) -> dict[str, Any]:
        return self.module.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.module.load_state_dict(state)

    def checkpoint_state(self) -> dict[str, Any]:
        """What a checkpoint's state keeps of this policy: here ``policy``, the weights, saved in
        ``state.pt``. The ``lm`` names its Hugging Face files instead (``POLICY_FILES``)."""
        return {"policy": self.state_dict()}

    def checkpoint_writer(self) -> Callable[[Path], None] | None:
        """A writer of this policy's files beside a checkpoint's state (``writer(directory)``), or
        None (the ``lm``: ``LMPolicy.save_pretrained``)."""
        return None

    def load_checkpoint(self, directory: Path, state: dict[str, Any]) -> None:
        """Load the weights of the checkpoint in ``directory`` whose state is ``state``."""
        self.load_state_dict(state["policy"])
