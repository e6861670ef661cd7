"""Hashed text features of contexts and candidate actions (the ``scorer`` policy and the critic).

The features see what the ``lm`` policy's prompt shows (``proas.policies.lm.build_prompt``), no
more and no less, so that the two policies act on the same information: the task, the number of
steps taken so far, the last ``history_length`` (observation, action) pairs, the current
observation and the admissible actions as the prompt lists them (without ``help``). Nothing from
older history enters, not even as counts. The admissible list is also how the text reveals what
the agent holds in the household env: ``move apple 1 to ...`` or ``heat apple 1 with ...`` are
admissible only while the apple is in hand.

Words are lower-cased alphanumeric runs. A feature is a short string (``"t:apple"``: the word
``apple`` in the task) hashed with CRC-32, which is stable across processes (Python's ``hash``
is salted per process, which would break resuming a run), into a table of ``2**bits`` rows.
Hashes are cached, and so are the id arrays of texts that recur (observations, commands,
admissible lists), so a step costs a few dictionary lookups per visible text.

Three kinds of features:

- context features (``u`` in the scorer), one set per context: ``t:`` task words; ``n:`` the
  step count; ``o:`` current-observation words; ``o1:``/``a1:`` the words of the last
  observation and action, ``o2:``/``a2:`` of the one before, up to ``history_length``; ``s:``
  the admissible list, as each command's verb and (verb, argument word) pairs (``s:move``,
  ``s:move:apple``);
- action features (``v``): the action's words, its verb and its word bigrams;
- pair features (a linear term): how an action relates to the same visible text: whether the
  prompt lists it as admissible, how many of its words appear in the task, in the current
  observation and in the recent observations, which recent action it repeats (if any), whether
  its verb is named in the task, and the task match crossed with admissibility; each keyed by
  the action's verb.
"""

from __future__ import annotations

import re
import zlib
from functools import lru_cache

import numpy as np

from proas.policies.base import Context

__all__ = ["Featurizer", "words", "shown_admissible"]

_WORD_RE = re.compile(r"[a-z]+|\d+")
# words that glue ALFWorld / WebShop commands together and say nothing about the target
_GLUE = frozenset({"to", "from", "in", "on", "with", "the", "a", "an", "of", "and", "some"})
_MAX_OBS_WORDS = 96
# bounds on the caches: a long run meets new observations forever, so each cache stops growing
# at its bound (later misses are recomputed) instead of holding every text ever seen
_ID_CACHE, _TEXT_CACHE, _LIST_CACHE = 1 << 20, 1 << 17, 1 << 15


@lru_cache(maxsize=1 << 16)
def words(text: str) -> tuple[str, ...]:
    """Lower-cased alphanumeric words of ``text`` (cached: actions recur constantly)."""
    return tuple(_WORD_RE.findall(text.lower()))


def shown_admissible(ctx: Context) -> tuple[str, ...]:
    """The admissible actions as the ``lm`` prompt lists them: in order, without ``help``."""
    if ctx.admissible is None:
        return ()
    return tuple(a for a in ctx.admissible if a != "help")


class Featurizer:
    """Maps contexts and actions to hashed feature ids in ``[0, 2**bits)``.

    ``history_length`` is the number of most recent (observation, action) pairs that the
    features see: the ``lm`` prompt's ``history_length`` (2, verl-agent's default).
    """

    def __init__(self, bits: int, history_length: int = 2):
        if history_length < 0:
            raise ValueError(f"history_length must be >= 0, got {history_length}")
        self.bits = bits
        self.history_length = int(history_length)
        self.mask = (1 << bits) - 1
        self._cache: dict[str, int] = {}
        self._text_cache: dict[tuple[str, str], np.ndarray] = {}
        self._list_cache: dict[tuple[str, ...], np.ndarray] = {}
        self._action_cache: dict[str, np.ndarray] = {}
        self._pair_cache: dict[tuple, np.ndarray] = {}

    def _id(self, feature: str) -> int:
        fid = self._cache.get(feature)
        if fid is None:
            fid = zlib.crc32(feature.encode("utf-8")) & self.mask
            if len(self._cache) < _ID_CACHE:
                self._cache[feature] = fid
        return fid

    def _ids(self, feats) -> np.ndarray:
        return np.fromiter((self._id(f) for f in sorted(set(feats))), dtype=np.int64)

    def _text_ids(self, prefix: str, text: str) -> np.ndarray:
        """Ids of ``prefix:word`` for the (first ``_MAX_OBS_WORDS``) words of ``text``."""
        key = (prefix, text)
        ids = self._text_cache.get(key)
        if ids is None:
            ids = self._ids(f"{prefix}:{w}" for w in words(text)[:_MAX_OBS_WORDS])
            if len(self._text_cache) < _TEXT_CACHE:
                self._text_cache[key] = ids
        return ids

    def _list_ids(self, shown: tuple[str, ...]) -> np.ndarray:
        """Ids of an admissible list: each command's verb and (verb, argument word) pairs.

        The pairs keep what the list says about the state (``s:move:apple``: the apple is in
        hand; ``s:take:mug``: a mug is here) without a feature per full command, which would
        only restate the candidate's own admissibility (that is a pair feature).
        """
        ids = self._list_cache.get(shown)
        if ids is None:
            feats = set()
            for a in shown:
                ws = words(a)
                if not ws:
                    continue
                feats.add("s:" + ws[0])
                feats.update(f"s:{ws[0]}:{w}" for w in ws[1:] if w not in _GLUE and not w.isdigit())
            ids = self._ids(feats)
            if len(self._list_cache) < _LIST_CACHE:
                self._list_cache[shown] = ids
        return ids

    def _recent(self, ctx: Context) -> list[tuple[str, str]]:
        """The visible window, most recent first (the prompt shows them oldest first)."""
        if self.history_length == 0:
            return []
        return ctx.history[-self.history_length:][::-1]

    def context_ids(self, ctx: Context) -> np.ndarray:
        """Feature ids of a context (the state the policy acts in), sorted and distinct."""
        parts = [
            np.array([self._id("bias"), self._id(f"n:{ctx.step}")], dtype=np.int64),
            self._text_ids("t", ctx.task),
            self._text_ids("o", ctx.observation),
            self._list_ids(shown_admissible(ctx)),
        ]
        for k, (obs, action) in enumerate(self._recent(ctx), 1):
            parts.append(self._text_ids(f"o{k}", obs))
            parts.append(self._text_ids(f"a{k}", action))
        # sorted and distinct: the parts carry distinct prefixes, so a repeated id is a hash
        # collision, and one row per context keeps the embedding sum a sum over a set as before
        return np.unique(np.concatenate(parts))

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
            ids = self._ids(feats)
            if len(self._action_cache) < 1 << 18:
                self._action_cache[action] = ids
        return ids

    def pair_ids(self, ctx: Context, actions: list[str]) -> list[np.ndarray]:
        """Feature ids relating each action to the context's visible text."""
        task_words = set(words(ctx.task))
        obs_words = set(words(ctx.observation))
        shown = set(shown_admissible(ctx))
        recent = self._recent(ctx)
        recent_words: set[str] = set()
        position: dict[str, int] = {}  # action -> 1 for the last action, 2 for the one before, ...
        for k, (obs, action) in enumerate(recent, 1):
            recent_words.update(words(obs))
            position.setdefault(action, k)
        out = []
        cache = self._pair_cache
        for action in actions:
            ws = words(action)
            verb = ws[0] if ws else "<none>"
            named = [w for w in ws[1:] if w not in _GLUE]
            in_task = min(3, sum(w in task_words for w in named if not w.isdigit()))
            in_obs = min(3, sum(w in obs_words for w in named))
            in_recent = min(3, sum(w in recent_words for w in named))
            adm = int(action in shown)
            key = (verb, adm, in_task, in_obs, in_recent, position.get(action, 0), verb in task_words)
            ids = cache.get(key)
            if ids is None:
                feats = (
                    f"ad:{verb}:{adm}",
                    f"m:{verb}:{in_task}",
                    f"mo:{verb}:{in_obs}",
                    f"mh:{verb}:{in_recent}",
                    f"rl:{verb}:{key[5]}",
                    f"vt:{verb}:{int(key[6])}",
                    f"ma:{verb}:{in_task}:{adm}",
                )
                ids = np.fromiter((self._id(f) for f in feats), dtype=np.int64)
                if len(cache) < 1 << 18:
                    cache[key] = ids
            out.append(ids)
        return out
