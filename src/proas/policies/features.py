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
_ID_CACHE, _TEXT_CACHE, _LIST_CACHE, _CONTEXT_CACHE = 1 << 20, 1 << 17, 1 << 15, 1 << 16


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
        self._action_cache: dict[str, tuple[np.ndarray, int]] = {}
        self._pair_cache: dict[tuple, tuple[np.ndarray, int]] = {}
        self._word_cache: dict[str, tuple] = {}
        self._base_cache: dict[tuple, np.ndarray] = {}
        self._step_ids: dict[int, int] = {}
        # content -> small integer, one table per embedding table (see ``_row_key``)
        self._act_keys: dict[bytes, int] = {}
        self._pair_keys: dict[bytes, int] = {}

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

    def context_key(self, ctx: Context) -> tuple:
        """What the features of ``ctx`` depend on, apart from the step count: the task, the
        observation, the admissible and invalid candidates and the visible history window. Two
        contexts with the same key get the same candidates, action and pair features, and context
        features that differ only in the step-count feature (the cache key of the scorer)."""
        adm = ctx.admissible
        return (ctx.task, ctx.observation, None if adm is None else tuple(adm), tuple(ctx.invalid_candidates),
                tuple(self._recent(ctx)))

    def context_base(self, ctx: Context) -> np.ndarray:
        """Sorted distinct ids of every context feature except the step count (read-only)."""
        parts = [
            np.array([self._id("bias")], dtype=np.int64),
            self._text_ids("t", ctx.task),
            self._text_ids("o", ctx.observation),
            self._list_ids(shown_admissible(ctx)),
        ]
        for k, (obs, action) in enumerate(self._recent(ctx), 1):
            parts.append(self._text_ids(f"o{k}", obs))
            parts.append(self._text_ids(f"a{k}", action))
        # sorted and distinct: the parts carry distinct prefixes, so a repeated id is a hash
        # collision, and one row per context keeps the embedding sum a sum over a set as before
        base = np.unique(np.concatenate(parts))
        base.flags.writeable = False
        return base

    def with_step(self, base: np.ndarray, step: int) -> np.ndarray:
        """``base`` with the step-count feature of ``step`` added: sorted and distinct, as
        ``np.unique`` of all the parts would give."""
        sid = self._step_ids.get(step)
        if sid is None:
            sid = self._step_ids[step] = self._id(f"n:{step}")
        pos = int(base.searchsorted(sid))
        if pos < len(base) and base[pos] == sid:
            return base
        return np.insert(base, pos, sid)

    def context_ids(self, ctx: Context) -> np.ndarray:
        """Feature ids of a context (the state the policy acts in), sorted and distinct."""
        key = self.context_key(ctx)
        base = self._base_cache.get(key)
        if base is None:
            base = self.context_base(ctx)
            if len(self._base_cache) < _CONTEXT_CACHE:
                self._base_cache[key] = base
        return self.with_step(base, ctx.step)

    def _row_key(self, table: dict[bytes, int], ids: np.ndarray) -> int:
        """A small integer naming the content of ``ids`` (equal arrays, equal keys): lets a batch
        find its distinct rows with one ``np.unique`` instead of hashing every array's bytes."""
        raw = ids.tobytes()
        key = table.get(raw)
        if key is None:
            key = table[raw] = len(table)
        return key

    def action_rows(self, actions: list[str]) -> tuple[list[np.ndarray], np.ndarray]:
        """``action_ids`` of each action, and each array's content key (``_row_key``)."""
        cache = self._action_cache
        arrays, keys = [], []
        for action in actions:
            hit = cache.get(action)
            if hit is None:
                hit = self._action_entry(action)
            arrays.append(hit[0])
            keys.append(hit[1])
        return arrays, np.array(keys, dtype=np.int64)

    def _action_entry(self, action: str) -> tuple[np.ndarray, int]:
        ws = words(action)
        feats = {"a:" + w for w in ws}
        if ws:
            feats.add("av:" + ws[0])
        feats.update(f"ab:{a}_{b}" for a, b in zip(ws, ws[1:]))
        if not feats:
            feats.add("a:<empty>")
        ids = self._ids(feats)
        entry = (ids, self._row_key(self._act_keys, ids))
        if len(self._action_cache) < 1 << 18:
            self._action_cache[action] = entry
        return entry

    def action_ids(self, action: str) -> np.ndarray:
        """Feature ids of an action on its own (cached per action string)."""
        hit = self._action_cache.get(action)
        return (hit if hit is not None else self._action_entry(action))[0]

    def _action_words(self, action: str) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
        """(verb, named words, named words that are not numbers) of an action (cached)."""
        hit = self._word_cache.get(action)
        if hit is None:
            ws = words(action)
            named = tuple(w for w in ws[1:] if w not in _GLUE)
            hit = (ws[0] if ws else "<none>", named, tuple(w for w in named if not w.isdigit()))
            if len(self._word_cache) < 1 << 18:
                self._word_cache[action] = hit
        return hit

    def pair_rows(self, ctx: Context, actions: list[str]) -> tuple[list[np.ndarray], np.ndarray]:
        """``pair_ids`` and each array's content key (``_row_key``)."""
        task_words = set(words(ctx.task))
        obs_words = set(words(ctx.observation))
        shown = set(shown_admissible(ctx))
        recent = self._recent(ctx)
        recent_words: set[str] = set()
        position: dict[str, int] = {}  # action -> 1 for the last action, 2 for the one before, ...
        for k, (obs, action) in enumerate(recent, 1):
            recent_words.update(words(obs))
            position.setdefault(action, k)
        out, keys = [], []
        cache = self._pair_cache
        action_words = self._action_words
        for action in actions:
            verb, named, named_nd = action_words(action)
            in_task = 0
            for w in named_nd:
                if w in task_words:
                    in_task += 1
            in_obs = in_recent = 0
            for w in named:
                if w in obs_words:
                    in_obs += 1
                if w in recent_words:
                    in_recent += 1
            key = (verb, int(action in shown), min(3, in_task), min(3, in_obs), min(3, in_recent),
                   position.get(action, 0), verb in task_words)
            hit = cache.get(key)
            if hit is None:
                hit = self._pair_entry(key)
            out.append(hit[0])
            keys.append(hit[1])
        return out, np.array(keys, dtype=np.int64)

    def _pair_entry(self, key: tuple) -> tuple[np.ndarray, int]:
        verb, adm, in_task, in_obs, in_recent, pos, verb_in_task = key
        feats = (
            f"ad:{verb}:{adm}",
            f"m:{verb}:{in_task}",
            f"mo:{verb}:{in_obs}",
            f"mh:{verb}:{in_recent}",
            f"rl:{verb}:{pos}",
            f"vt:{verb}:{int(verb_in_task)}",
            f"ma:{verb}:{in_task}:{adm}",
        )
        ids = np.fromiter((self._id(f) for f in feats), dtype=np.int64)
        entry = (ids, self._row_key(self._pair_keys, ids))
        if len(self._pair_cache) < 1 << 18:
            self._pair_cache[key] = entry
        return entry

    def pair_ids(self, ctx: Context, actions: list[str]) -> list[np.ndarray]:
        """Feature ids relating each action to the context's visible text."""
        return self.pair_rows(ctx, actions)[0]
