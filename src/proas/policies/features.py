"""Hashed text features of contexts and candidate actions (the ``scorer`` policy and the critic).

The features see what the ``lm`` policy's prompt shows (``proas.lm.prompt.build_prompt``), no
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
from typing import NamedTuple

import numpy as np

from proas.policies.base import Context

__all__ = ["Featurizer", "Turn", "words", "shown_admissible"]

_WORD_RE = re.compile(r"[a-z]+|\d+")
# words that glue ALFWorld / WebShop commands together and say nothing about the target
_GLUE = frozenset({"to", "from", "in", "on", "with", "the", "a", "an", "of", "and", "some"})
_MAX_OBS_WORDS = 96
# bounds on the caches: a long run meets new observations forever, so a cache of texts or
# candidate lists starts over at its bound (``_keep``) instead of holding every text ever seen
_ID_CACHE, _TEXT_CACHE, _LIST_CACHE = 1 << 20, 1 << 17, 1 << 15
#: the most (context, word id) marks ``Featurizer.turn`` keeps (a bool each); a larger turn searches
_MARKS_MAX = 1 << 26


@lru_cache(maxsize=1 << 16)
def words(text: str) -> tuple[str, ...]:
    """Lower-cased alphanumeric words of ``text`` (cached: actions recur constantly)."""
    return tuple(_WORD_RE.findall(text.lower()))


def _keep(cache: dict, key, value, bound: int) -> None:
    """Store ``value`` under ``key``, emptying ``cache`` first when it holds ``bound`` entries: a
    long run keeps meeting new texts and candidate lists, and what recurs is mostly recent (the
    episodes of one group, the fixed validation tasks), so the cache starts over rather than
    keeping only what it met first."""
    if len(cache) >= bound:
        cache.clear()
    cache[key] = value


def shown_admissible(ctx: Context) -> tuple[str, ...]:
    """The admissible actions as the ``lm`` prompt lists them: in order, without ``help``."""
    if ctx.admissible is None:
        return ()
    return tuple(a for a in ctx.admissible if a != "help")


def _sorted_distinct(ids: np.ndarray) -> np.ndarray:
    """``np.unique(ids)`` of an integer array, by one sort: numpy 2's ``np.unique`` hashes
    first, which is several times slower on these arrays; the result is the same. The stable
    sort (a merge sort that takes sorted runs whole) suits these arrays, which are runs of
    sorted rows one after another."""
    if len(ids) < 2:
        return ids.copy()
    ids = np.sort(ids, kind="stable")
    keep = np.empty(len(ids), dtype=bool)
    keep[0] = True
    np.not_equal(ids[1:], ids[:-1], out=keep[1:])
    return ids[keep]


def run_positions(starts: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The positions of the runs ``starts[i]:starts[i] + lens[i]`` joined in order, and where
    each run starts among them."""
    off = lens.cumsum()
    off -= lens
    idx = (starts - off).repeat(lens)
    idx += np.arange(len(idx), dtype=np.int64)
    return idx, off


class _Grow:
    """A 1-D integer numpy array appended at the end (doubling its capacity when full)."""

    def __init__(self):
        self.data = np.zeros(256, dtype=np.int64)
        self.n = 0

    def extend(self, values) -> None:
        end = self.n + len(values)
        if end > len(self.data):
            grown = np.zeros(max(end, 2 * len(self.data)), dtype=np.int64)
            grown[: self.n] = self.data[: self.n]
            self.data = grown
        self.data[self.n: end] = values
        self.n = end


class _Ragged:
    """Variable-length rows of ``width`` parallel integer columns, appended one row at a time:
    each row's start and length, and the flat elements, one 1-D array per column (a gather
    from 1-D arrays is about twice as fast as from rows of a 2-D one)."""

    def __init__(self, width: int = 1):
        self.starts, self.lens = _Grow(), _Grow()
        self.cols = [_Grow() for _ in range(width)]
        self._scratch = np.zeros(0, dtype=np.int64)  # ``first_rows``' work space, one slot a row

    def __len__(self) -> int:
        return self.starts.n

    def add(self, *columns: np.ndarray) -> None:
        self.starts.extend((self.cols[0].n,))
        self.lens.extend((len(columns[0]),))
        if len(columns[0]):
            for col, values in zip(self.cols, columns):
                col.extend(values)

    def gather(self, rows: np.ndarray) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
        """For ``rows`` (row numbers, repeats allowed), row after row: which entry of ``rows`` each
        element comes from, the elements (one array per column), and where each row starts
        among them."""
        lens = self.lens.data[rows]
        idx, out_start = run_positions(self.starts.data[rows], lens)
        which = np.arange(len(rows), dtype=np.int64).repeat(lens)
        return which, [col.data[idx] for col in self.cols], out_start

    def first_rows(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The positions in ``keys`` (row numbers) where each distinct key first occurs, in that
        order, and each entry's index among them: ``np.unique`` by first occurrence, without a
        sort, through one work slot per row (only the slots of ``keys`` are written and read)."""
        n = len(keys)
        if len(self._scratch) < len(self):
            self._scratch = np.zeros(max(len(self), 2 * len(self._scratch)), dtype=np.int64)
        slot = self._scratch
        positions = np.arange(n, dtype=np.int64)
        slot[keys[::-1]] = positions[::-1]  # a repeated key keeps the last write: its first position
        firsts = np.flatnonzero(slot[keys] == positions)
        slot[keys[firsts]] = np.arange(len(firsts), dtype=np.int64)
        return firsts, slot[keys]


class Turn(NamedTuple):
    """A turn's features flat, in context order (``Featurizer.turn``): the context ids
    (context ``i``'s are ``ctx_ids[ctx_bounds[i]:ctx_bounds[i + 1]]``), the number of candidates
    of each context, each candidate's action key and pair key, and the featurizer's tables
    from key to ids, flat (read only: rows of ``_Ragged``)."""

    ctx_ids: np.ndarray
    ctx_bounds: np.ndarray
    counts: np.ndarray
    act_keys: np.ndarray
    pair_keys: np.ndarray
    act_rows: _Ragged
    pair_rows: _Ragged

    def context(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Context ``i``'s context ids, action keys and pair keys (views of the turn's arrays)."""
        lo = int(self.counts[:i].sum())
        hi = lo + int(self.counts[i])
        return (self.ctx_ids[self.ctx_bounds[i]:self.ctx_bounds[i + 1]], self.act_keys[lo:hi],
                self.pair_keys[lo:hi])


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
        self._command_cache: dict[str, np.ndarray] = {}
        # content -> small integer, one table per embedding table (see ``_row_key``)
        self._act_keys: dict[bytes, int] = {}
        self._pair_keys: dict[bytes, int] = {}
        self._pair_table: list[np.ndarray] = []  # pair key -> its ids
        self._act_table: list[np.ndarray] = []  # action key -> its ids
        self._pair_rows, self._act_rows = _Ragged(), _Ragged()  # the same, flat (``_collate_keys``)
        # the turn-at-a-time path (``batch``)
        self._wids: dict[str, int] = {}
        # candidate actions met by ``turn``, numbered: per number (verb number, verb word id,
        # action key, is help), named words (word id, not a number), admissible-list ids
        self._cnum: dict[str, int] = {}
        #: (admissible, invalid candidates) -> (candidates, their numbers, how many are admissible);
        #: the candidate lists are shared by the turns that meet them: read only
        self._cand_cache: dict[tuple, tuple[list[str], list[int], int]] = {}
        self._c_verb, self._c_vwid, self._c_key, self._c_help = _Grow(), _Grow(), _Grow(), _Grow()
        self._c_named = _Ragged(2)
        self._c_cmd = _Ragged(1)
        self._verb_nums: dict[str, int] = {}
        self._verb_list: list[str] = []
        self._step_heads: dict[int, np.ndarray] = {}
        self._prefixes = [(f"o{k}", f"a{k}") for k in range(1, self.history_length + 1)]
        self._code_keys = np.zeros(0, dtype=np.int64)  # a candidate's pair code -> its pair key
        self._marks = np.zeros(0, dtype=bool)  # ``turn``'s membership marks (all False between turns)
        # the turn path's texts: per kind (a prefix's feature ids, "w": a text's word-id set, "n":
        # a step's head) each text's row in one flat store, which starts over at its bound
        self._text_rows = _Ragged()
        self._text_index: dict[str, dict] = {}

    def _id(self, feature: str) -> int:
        fid = self._cache.get(feature)
        if fid is None:
            fid = zlib.crc32(feature.encode("utf-8")) & self.mask
            if len(self._cache) < _ID_CACHE:
                self._cache[feature] = fid
        return fid

    def _ids(self, feats) -> np.ndarray:
        return np.fromiter((self._id(f) for f in sorted(set(feats))), dtype=np.int64)

    def _prefixed_ids(self, prefix: str, text: str) -> np.ndarray:
        """Ids of ``prefix:word`` for the (first ``_MAX_OBS_WORDS``) words of ``text``."""
        return self._ids(f"{prefix}:{w}" for w in words(text)[:_MAX_OBS_WORDS])

    def _text_ids(self, prefix: str, text: str) -> np.ndarray:
        """``_prefixed_ids``, cached per (prefix, text)."""
        key = (prefix, text)
        ids = self._text_cache.get(key)
        if ids is None:
            ids = self._prefixed_ids(prefix, text)
            _keep(self._text_cache, key, ids, _TEXT_CACHE)
        return ids

    def _list_ids(self, shown: tuple[str, ...]) -> np.ndarray:
        """Ids of an admissible list: each command's verb and (verb, argument word) pairs.

        The pairs keep what the list says about the state (``s:move:apple``: the apple is in
        hand; ``s:take:mug``: a mug is here) without a feature per full command, which would
        only restate the candidate's own admissibility (that is a pair feature).
        """
        ids = self._list_cache.get(shown)
        if ids is None:
            # the list's ids as a set: each command's ids are cached, and the context ids are
            # made distinct and sorted downstream (np.unique), so only the set matters here
            parts = [self._command_list_ids(a) for a in shown]
            ids = _sorted_distinct(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
            _keep(self._list_cache, shown, ids, _LIST_CACHE)
        return ids

    def _command_list_ids(self, command: str) -> np.ndarray:
        """The ids one command adds to its admissible list's features (cached per command)."""
        ids = self._command_cache.get(command)
        if ids is None:
            ws = words(command)
            feats: set[str] = set()
            if ws:
                feats.add("s:" + ws[0])
                feats.update(f"s:{ws[0]}:{w}" for w in ws[1:] if w not in _GLUE and not w.isdigit())
            ids = self._ids(feats)
            if len(self._command_cache) < 1 << 18:
                self._command_cache[command] = ids
        return ids

    def _recent(self, ctx: Context) -> list[tuple[str, str]]:
        """The visible window, most recent first (the prompt shows them oldest first)."""
        if self.history_length == 0:
            return []
        return ctx.history[-self.history_length:][::-1]

    def _step_head(self, step: int) -> np.ndarray:
        """The ids of the bias and the step-count feature of ``step`` (cached per step)."""
        head = self._step_heads.get(step)
        if head is None:
            head = self._step_heads[step] = np.array([self._id("bias"), self._id(f"n:{step}")], dtype=np.int64)
        return head

    def _context_parts(self, ctx: Context, recent: list[tuple[str, str]], list_ids: np.ndarray) -> list[np.ndarray]:
        """The id arrays whose union is the context's features: bias and step count, task,
        observation, the admissible list (``list_ids``), and each (observation, action) of the
        visible window ``recent``."""
        parts = [self._step_head(ctx.step), self._text_ids("t", ctx.task), self._text_ids("o", ctx.observation),
                 list_ids]
        for (obs, action), (po, pa) in zip(recent, self._prefixes):
            parts.append(self._text_ids(po, obs))
            parts.append(self._text_ids(pa, action))
        return parts

    def context_ids(self, ctx: Context) -> np.ndarray:
        """Feature ids of a context (the state the policy acts in), sorted and distinct."""
        # sorted and distinct: the parts carry distinct prefixes, so a repeated id is a hash
        # collision, and one row per context keeps the embedding sum a sum over a set as before
        return _sorted_distinct(np.concatenate(self._context_parts(ctx, self._recent(ctx),
                                                                    self._list_ids(shown_admissible(ctx)))))

    def _row_key(self, table: dict[bytes, int], ids: np.ndarray, arrays: list[np.ndarray], rows: _Ragged) -> int:
        """A small integer naming the content of ``ids`` (equal arrays, equal keys): lets a batch
        find its distinct rows by key instead of hashing every array's bytes. ``arrays`` keeps
        each key's array at its index, and ``rows`` the same flat."""
        raw = ids.tobytes()
        key = table.get(raw)
        if key is None:
            key = table[raw] = len(table)
            arrays.append(ids)
            rows.add(ids)
        return key

    def _action_entry(self, action: str) -> tuple[np.ndarray, int]:
        """(``action_ids``, its content key (``_row_key``)) of an action (cached per string)."""
        hit = self._action_cache.get(action)
        if hit is not None:
            return hit
        ws = words(action)
        feats = {"a:" + w for w in ws}
        if ws:
            feats.add("av:" + ws[0])
        feats.update(f"ab:{a}_{b}" for a, b in zip(ws, ws[1:]))
        if not feats:
            feats.add("a:<empty>")
        ids = self._ids(feats)
        entry = (ids, self._row_key(self._act_keys, ids, self._act_table, self._act_rows))
        if len(self._action_cache) < 1 << 18:
            self._action_cache[action] = entry
        return entry

    def action_ids(self, action: str) -> np.ndarray:
        """Feature ids of an action on its own (cached per action string)."""
        return self._action_entry(action)[0]

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

    def pair_ids(self, ctx: Context, actions: list[str]) -> list[np.ndarray]:
        """Feature ids relating each action to the context's visible text, one context at a time
        (``batch`` computes the same for a whole turn)."""
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
        return out

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
        entry = (ids, self._row_key(self._pair_keys, ids, self._pair_table, self._pair_rows))
        if len(self._pair_cache) < 1 << 18:
            self._pair_cache[key] = entry
        return entry

    # ------------------------------------------------------------------ a turn at once
    #
    # ``batch`` computes, for every context of a turn, what ``context_ids``, ``action_ids``
    # and ``pair_ids`` give one context at a time (tests/test_scorer_features.py checks it),
    # with numpy over the turn's candidates instead of Python per candidate: words become
    # integer ids, the word tests become sorted-array look-ups, and each candidate's pair key
    # becomes one integer code looked up once per distinct code.

    def _word_id(self, w: str) -> int:
        wid = self._wids.get(w)
        if wid is None:
            wid = self._wids[w] = len(self._wids)
        return wid

    def _new_text(self, kind: str, text) -> int:
        """The row of ``text`` of ``kind`` in the turn path's text store, made on first need:
        ``kind`` a feature prefix (``_prefixed_ids``), ``"w"`` (the sorted distinct word ids of
        all its words: the pair features' sets) or ``"n"`` (a step count, ``_step_head``)."""
        if kind == "w":
            ids = _sorted_distinct(np.fromiter((self._word_id(w) for w in words(text)), dtype=np.int64))
        elif kind == "n":
            ids = self._step_head(text)
        else:
            ids = self._prefixed_ids(kind, text)
        row = self._text_index[kind][text] = len(self._text_rows)
        self._text_rows.add(ids)
        return row

    def _register(self, action: str) -> int:
        """The candidate number of ``action``, recording what the turn path gathers of it: its
        verb number, its verb's word id (-1 without a verb), its action key, whether it is
        ``help``, its named word ids (and whether each is not a number) and the ids it adds to an
        admissible list's features (``_command_list_ids``)."""
        num = self._cnum.get(action)
        if num is not None:
            return num
        verb, named, _ = self._action_words(action)
        vnum = self._verb_nums.get(verb)
        if vnum is None:
            vnum = self._verb_nums[verb] = len(self._verb_list)
            self._verb_list.append(verb)
        key = self._action_entry(action)[1]
        num = self._cnum[action] = len(self._cnum)
        self._c_verb.extend((vnum,))
        self._c_vwid.extend((self._word_id(verb) if verb != "<none>" else -1,))
        self._c_key.extend((key,))
        self._c_help.extend((int(action == "help"),))
        self._c_named.add(np.fromiter((self._word_id(w) for w in named), dtype=np.int64, count=len(named)),
                          np.fromiter((not w.isdigit() for w in named), dtype=np.int64, count=len(named)))
        cmd = self._command_list_ids(action)
        self._c_cmd.add(cmd)
        return num

    def batch(self, contexts: list[Context]) -> list[tuple[list[str], np.ndarray, list[np.ndarray], np.ndarray,
                                                            list[np.ndarray], np.ndarray]]:
        """Per context: (candidates, context ids, action arrays, action keys, pair arrays, pair
        keys), exactly what ``candidate_actions``, ``context_ids``, ``action_ids`` (with its key)
        and ``pair_ids`` give it."""
        act_table, pair_table = self._act_table, self._pair_table
        cand_lists, turn = self.turn(contexts)
        if turn is None:
            return []
        bounds, ends = turn.ctx_bounds.tolist(), np.cumsum(turn.counts).tolist()
        out = []
        for i, cands in enumerate(cand_lists):
            lo, hi = ends[i] - len(cands), ends[i]
            ak, pk = turn.act_keys[lo:hi], turn.pair_keys[lo:hi]
            out.append((list(cands), turn.ctx_ids[bounds[i]:bounds[i + 1]], [act_table[k] for k in ak.tolist()], ak,
                        [pair_table[k] for k in pk.tolist()], pk))
        return out

    def turn(self, contexts: list[Context]) -> tuple[list[list[str]], Turn | None]:
        """Per context, its candidates (a list that other turns may share: read only); and the
        turn's features, flat in context order (``Turn``; None without contexts): the context
        ids, and the candidates' action keys and pair keys, which name rows of the featurizer's
        tables (``batch`` gives the arrays); what the scorer packs into one forward pass.

        Each candidate action is numbered once and what its features need is kept in arrays by
        that number (``_register``), so a turn gathers its candidates' verbs, keys and words
        with numpy; a context costs one dictionary look-up per candidate and per visible text.
        """
        if not contexts:
            return [], None
        H = self.history_length
        cnum, register, cand_cache = self._cnum, self._register, self._cand_cache
        if len(self._text_rows) >= _TEXT_CACHE:  # the text store starts over (between turns only)
            self._text_rows, self._text_index = _Ragged(), {}
        index = self._text_index
        kinds = ["n", "t", "o", "w", *(k for pair in self._prefixes for k in pair)]
        for kind in kinds:
            index.setdefault(kind, {})
        n_idx, t_idx, o_idx, w_idx = index["n"], index["t"], index["o"], index["w"]
        window = [(index[po], po, index[pa], pa) for po, pa in self._prefixes]
        new_text = self._new_text
        recents, cand_lists, flat_nums = [], [], []
        # rows of the text store: each context's feature texts (``texts``, ``n_texts`` each), its
        # task's and observation's word sets, and its recent observations' word sets
        # (``rec_w[k]``: each context's (k+1)-th most recent observation, or the empty text's row)
        texts, n_texts, task_w, obs_w = [], [], [], []
        rec_w: list[list[int]] = [[] for _ in range(H)]
        empty = w_idx.get("")
        if empty is None:
            empty = new_text("w", "")
        n_adm = []
        for ctx in contexts:
            if ctx.admissible is None:
                from proas.policies.base import candidate_actions

                candidate_actions(ctx)  # raises the one-line error
            # the candidates: admissible then invalid, each once, in order; with their numbers and
            # how many are admissible, kept per (admissible, invalid) lists (a state's episodes
            # and validations meet the same lists again)
            lists = (tuple(ctx.admissible), tuple(ctx.invalid_candidates))
            found = cand_cache.get(lists)
            if found is None:
                seen = dict.fromkeys(lists[0])
                n = len(seen)
                seen.update(dict.fromkeys(lists[1]))
                cands = list(seen)
                if not cands:
                    from proas.errors import ProasError

                    raise ProasError(f"env {ctx.env_name!r} offered no candidate action at step {ctx.step}")
                try:
                    nums = list(map(cnum.__getitem__, cands))
                except KeyError:  # a candidate met for the first time
                    nums = list(map(register, cands))
                found = (cands, nums, n)
                _keep(cand_cache, lists, found, _LIST_CACHE)
            cands, nums, n = found
            n_adm.append(n)
            cand_lists.append(cands)
            flat_nums.extend(nums)
            task, obs_now, step = ctx.task, ctx.observation, ctx.step
            row = n_idx.get(step)
            texts.append(row if row is not None else new_text("n", step))
            row = t_idx.get(task)
            texts.append(row if row is not None else new_text("t", task))
            row = o_idx.get(obs_now)
            texts.append(row if row is not None else new_text("o", obs_now))
            row = w_idx.get(task)
            task_w.append(row if row is not None else new_text("w", task))
            row = w_idx.get(obs_now)
            obs_w.append(row if row is not None else new_text("w", obs_now))
            recent = self._recent(ctx)
            recents.append(recent)
            for (obs, action), (o_k, po, a_k, pa), rec in zip(recent, window, rec_w):
                row = o_k.get(obs)
                texts.append(row if row is not None else new_text(po, obs))
                row = a_k.get(action)
                texts.append(row if row is not None else new_text(pa, action))
                row = w_idx.get(obs)
                rec.append(row if row is not None else new_text("w", obs))
            if len(recent) < H:  # a short history: no words at the window's older places
                for rec in rec_w[len(recent):]:
                    rec.append(empty)
            n_texts.append(3 + 2 * len(recent))
        B = len(contexts)
        # candidates of the turn, flattened
        n_c = np.fromiter((len(c) for c in cand_lists), dtype=np.int64, count=B)
        c_off = np.zeros(B + 1, dtype=np.int64)
        np.cumsum(n_c, out=c_off[1:])
        N = int(c_off[-1])
        cand_ctx = np.repeat(np.arange(B, dtype=np.int64), n_c)
        nums = np.array(flat_nums, dtype=np.int64)
        verbs, verb_wids, act_keys = self._c_verb.data[nums], self._c_vwid.data[nums], self._c_key.data[nums]
        slot = np.arange(N, dtype=np.int64) - c_off[:-1][cand_ctx]
        adm = ((slot < np.array(n_adm, dtype=np.int64)[cand_ctx]) & (self._c_help.data[nums] == 0)).astype(np.int64)
        w_cand, (w_ids, w_nd), _ = self._c_named.gather(nums)
        w_ctx = cand_ctx[w_cand]
        # context ids: one sort over (context, id) for the whole turn; the admissible list's ids
        # are those of its commands (each admissible candidate's), as a set
        shown = np.flatnonzero(adm)
        l_which, (l_ids,), _ = self._c_cmd.gather(nums[shown])
        store = self._text_rows
        t_which, (t_ids,), _ = store.gather(np.array(texts, dtype=np.int64))
        owner = np.concatenate([np.repeat(np.arange(B, dtype=np.int64), np.array(n_texts, dtype=np.int64))[t_which],
                                cand_ctx[shown][l_which]])
        vals = np.concatenate([t_ids, l_ids])
        uniq = _sorted_distinct((owner << 32) | vals)
        bounds = np.searchsorted(uniq >> 32, np.arange(B + 1, dtype=np.int64))
        ctx_ids = uniq & 0xFFFFFFFF

        # membership marks, one slot per (context, word id): set for a word set, read, cleared;
        # a turn too large for them (``_MARKS_MAX`` slots) searches the sorted sets instead
        V = max(len(self._wids), 1)
        if len(self._marks) < B * V <= _MARKS_MAX:
            self._marks = np.zeros(min(max(B * V, 2 * len(self._marks)), _MARKS_MAX), dtype=bool)
        marks = self._marks if B * V <= _MARKS_MAX else None

        def member(rows: list[int], ctx_of: np.ndarray, ids: np.ndarray,
                   owners: np.ndarray | None = None) -> np.ndarray:
            """Whether ``ids[j]`` (a word id, or -1: none) is in the union of the word sets of
            context ``ctx_of[j]``: ``rows[i]`` is a word-set row in the text store, context
            ``owners[i]``'s (without ``owners``: context ``i``'s, one set each)."""
            which, (found,), _ = store.gather(np.array(rows, dtype=np.int64))
            if owners is not None:
                which = owners[which]
            named = ids >= 0
            if marks is None:  # one sorted table of (context, word id): the sets are sorted
                table = (which << 32) | found
                if owners is not None:
                    table.sort()  # repeats stay: the first of equal entries is found
                if len(table) == 0:
                    return np.zeros(len(ids), dtype=bool)
                probe = (ctx_of << 32) | np.where(named, ids, 0xFFFFFFFF)
                pos = np.minimum(np.searchsorted(table, probe), len(table) - 1)
                return (table[pos] == probe) & named
            slots = which * V + found
            marks[slots] = True
            out = marks[ctx_of * V + np.where(named, ids, 0)] & named
            marks[slots] = False
            return out

        # the task's words: the candidates' named words and their verbs, in one look-up
        in_task_set = member(task_w, np.concatenate([w_ctx, cand_ctx]), np.concatenate([w_ids, verb_wids]))
        in_task = np.bincount(w_cand, weights=in_task_set[: len(w_ids)] & w_nd, minlength=N).astype(np.int64)
        verb_in_task = in_task_set[len(w_ids):].astype(np.int64)
        in_obs = np.bincount(w_cand, weights=member(obs_w, w_ctx, w_ids), minlength=N).astype(np.int64)
        # in the union of the window's observations (``rec_w``: one row per context and place)
        in_window = member([r for place in rec_w for r in place], w_ctx, w_ids,
                           np.tile(np.arange(B, dtype=np.int64), H))
        in_rec = np.bincount(w_cand, weights=in_window, minlength=N).astype(np.int64)
        pos = np.zeros(N, dtype=np.int64)
        for k in range(H, 0, -1):  # the most recent repeat wins (position 1)
            rk = np.fromiter((cnum.get(r[k - 1][1], -1) if len(r) >= k else -1 for r in recents),
                             dtype=np.int64, count=B)
            pos = np.where(nums == rk[cand_ctx], k, pos)
        code = ((((((verbs * 2 + adm) * 4 + np.minimum(in_task, 3)) * 4 + np.minimum(in_obs, 3)) * 4
                  + np.minimum(in_rec, 3)) * (H + 1) + pos) * 2 + verb_in_task)
        # each code's pair key, kept by code (``_code_keys``: -1 where none yet)
        if int(code.max()) >= len(self._code_keys):
            grown = np.full(max(int(code.max()) + 1, 2 * len(self._code_keys)), -1, dtype=np.int64)
            grown[: len(self._code_keys)] = self._code_keys
            self._code_keys = grown
        pair_keys = self._code_keys[code]
        if (pair_keys < 0).any():
            for cd in np.unique(code[pair_keys < 0]).tolist():
                rest, vit = divmod(cd, 2)
                rest, p = divmod(rest, H + 1)
                rest, ir = divmod(rest, 4)
                rest, io = divmod(rest, 4)
                rest, it = divmod(rest, 4)
                vnum, a = divmod(rest, 2)
                key = (self._verb_list[vnum], a, it, io, ir, p, bool(vit))
                entry = self._pair_cache.get(key) or self._pair_entry(key)
                self._code_keys[cd] = entry[1]
            pair_keys = self._code_keys[code]
        return cand_lists, Turn(ctx_ids, bounds, n_c, act_keys, pair_keys, self._act_rows, self._pair_rows)

