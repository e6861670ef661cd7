"""Hashed text features of contexts and candidate actions (the ``scorer`` policy and the critic).

Words are lower-cased alphanumeric runs. A feature is a short string (``"t:apple"``: the word
``apple`` in the task) hashed with CRC-32, which is stable across processes (Python's ``hash``
is salted per process, which would break resuming a run), into a table of ``2**bits`` rows.
Hashes are cached, so a feature string is hashed once per process.

Three kinds of features:

- context features (``u`` in the scorer): words of the task, of the current observation and
  of the last action, the verbs already used in the episode, and the (verb, word) pairs of
  earlier actions whose word appears in the task (``took apple``, ``cleaned apple``): the
  episode's progress as text;
- action features (``v``): the action's words, its verb and its word bigrams;
- pair features (a linear term): how an action relates to this context: how many of its words
  appear in the task and in the current observation, how often it was already taken, whether it
  repeats the last action, whether its verb is named in the task, and the match count crossed
  with the sequence of verbs used so far; each keyed by the action's verb.
"""

from __future__ import annotations

import re
import zlib
from functools import lru_cache

import numpy as np

from proas.policies.base import Context

__all__ = ["Featurizer", "words"]

_WORD_RE = re.compile(r"[a-z]+|\d+")
# words that glue ALFWorld / WebShop commands together and say nothing about the target
_GLUE = frozenset({"to", "from", "in", "on", "with", "the", "a", "an", "of", "and", "some"})
_MAX_OBS_WORDS = 96


@lru_cache(maxsize=1 << 16)
def words(text: str) -> tuple[str, ...]:
    """Lower-cased alphanumeric words of ``text`` (cached: actions recur constantly)."""
    return tuple(_WORD_RE.findall(text.lower()))


class Featurizer:
    """Maps contexts and actions to hashed feature ids in ``[0, 2**bits)``."""

    def __init__(self, bits: int):
        self.bits = bits
        self.mask = (1 << bits) - 1
        self._cache: dict[str, int] = {}
        self._action_cache: dict[str, np.ndarray] = {}
        self._pair_cache: dict[tuple, np.ndarray] = {}

    def _id(self, feature: str) -> int:
        fid = self._cache.get(feature)
        if fid is None:
            fid = zlib.crc32(feature.encode("utf-8")) & self.mask
            if len(self._cache) < 1 << 20:
                self._cache[feature] = fid
        return fid

    def context_ids(self, ctx: Context) -> np.ndarray:
        """Feature ids of a context (the state the policy acts in)."""
        task_words = set(words(ctx.task))
        feats = {"bias"}
        feats.update("t:" + w for w in task_words)
        feats.update("o:" + w for w in words(ctx.observation)[:_MAX_OBS_WORDS])
        if ctx.history:
            last = ctx.history[-1][1]
            feats.update("l:" + w for w in words(last))
            for _, action in ctx.history:
                ws = words(action)
                if not ws:
                    continue
                feats.add("p:" + ws[0])
                for w in ws[1:]:
                    if w in task_words and w not in _GLUE:
                        feats.add(f"pm:{ws[0]}:{w}")
        else:
            feats.add("first")
        return np.fromiter((self._id(f) for f in sorted(feats)), dtype=np.int64)

    def action_ids(self, action: str) -> np.ndarray:
        """Feature ids of an action on its own (cached per action string)."""
        ids = self._action_cache.get(action)
        if ids is None:
            ws = words(action)
            feats = {"a:" + w for w in ws}
            if ws:
                feats.add("av:" + ws[0])
            feats.update(f"ab:{a}_{b}" for a, b in zip(ws, ws[1:]))
            if not feats:
                feats.add("a:<empty>")
            ids = np.fromiter((self._id(f) for f in sorted(feats)), dtype=np.int64)
            if len(self._action_cache) < 1 << 18:
                self._action_cache[action] = ids
        return ids

    def pair_ids(self, ctx: Context, actions: list[str]) -> list[np.ndarray]:
        """Feature ids relating each action to the context."""
        task_words = set(words(ctx.task))
        obs_words = set(words(ctx.observation))
        done: dict[str, int] = {}
        for _, a in ctx.history:
            done[a] = done.get(a, 0) + 1
        last = ctx.history[-1][1] if ctx.history else None
        # the verbs used so far, in order of first use: a coarse, task-independent progress code
        used: dict[str, None] = {}
        for _, a in ctx.history:
            ws = words(a)
            if ws:
                used.setdefault(ws[0], None)
        progress = ",".join(used)
        out = []
        cache = self._pair_cache
        for action in actions:
            ws = words(action)
            verb = ws[0] if ws else "<none>"
            args = [w for w in ws[1:] if w not in _GLUE and not w.isdigit()]
            in_task = min(3, sum(w in task_words for w in args))
            in_obs = min(3, sum(w in obs_words for w in ws[1:] if w not in _GLUE))
            times = min(3, done.get(action, 0))
            key = (verb, in_task, in_obs, times, action == last, verb in task_words, progress)
            ids = cache.get(key)
            if ids is None:
                feats = (
                    f"m:{verb}:{in_task}",
                    f"mo:{verb}:{in_obs}",
                    f"r:{verb}:{times}",
                    f"rl:{verb}:{int(action == last)}",
                    f"mr:{verb}:{in_task}:{times}",
                    f"vt:{verb}:{int(verb in task_words)}",
                    f"mp:{verb}:{in_task}:{progress}",
                )
                ids = np.fromiter((self._id(f) for f in feats), dtype=np.int64)
                if len(cache) < 1 << 18:
                    cache[key] = ids
            out.append(ids)
        return out
