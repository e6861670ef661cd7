"""The reference graph's dynamic topological order (Pearce–Kelly), which keeps it acyclic.

Every node holds a unique float order, and every edge ``u -> v`` has ``ord[u] < ord[v]``. An
edge with ``ord[u] < ord[v]`` is accepted at once; otherwise a two-way search (forward from
``v``, backward from ``u``, both inside the order window between them) either meets, and the
edge would close a cycle, or one side runs dry, and the window's affected nodes are reordered
(``TopologicalOrder.make_room``). So merging a batch into a graph of ten thousand nodes costs a
few milliseconds, not a search of the whole graph.

The order knows nodes only by id; the graph passes its successor and predecessor tables in
where the order must search them.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping

__all__ = ["TopologicalOrder", "is_acyclic"]

#: a graph's adjacency: node -> {neighbour: number of edge triples between them}
Adjacency = Mapping[int, Mapping[int, int]]


class TopologicalOrder:
    """Unique float orders for node ids, kept topological as edges arrive."""

    #: phases of the first value in a gap: the golden-ratio sequence, irrational offsets that keep
    #: new orders off the (often integral) existing ones and apart from earlier splits of the same
    #: gap (two batch paths often make a detour between the same two known states)
    _PHASES = tuple((0.618034 * t) % 1.0 for t in range(1, 9))

    def __init__(self) -> None:
        #: node id -> order
        self.ord: dict[int, float] = {}
        self._values: set[float] = set()  # orders are unique; new ones must not collide
        self._next = 0.0
        self._min = 0.0

    def append(self, i: int) -> None:
        """Order a new node after every other."""
        self.ord[i] = self._next
        self._values.add(self._next)
        self._next += 1.0

    def discard(self, i: int) -> None:
        self._values.discard(self.ord.pop(i))

    def sorted(self, nodes: Iterable[int]) -> list[int]:
        """``nodes`` in topological order."""
        return sorted(nodes, key=self.ord.__getitem__)

    def place_new_nodes(self, ids: list[int], new: list[bool]) -> None:
        """Give each run of new path nodes orders between its known neighbours on the path.

        New nodes are otherwise appended at the end of the topological order, which makes an
        edge from a new node back into the known graph search a large region. Orders are
        floats; when a gap is too narrow to split, all orders are renumbered (rare: a gap
        halves with each split, and floats hold some thirty halvings of it).
        """
        k = 0
        while k < len(ids):
            if not new[k]:
                k += 1
                continue
            j = k
            while j + 1 < len(ids) and new[j + 1]:
                j += 1
            run = list(dict.fromkeys(ids[k : j + 1]))  # a path may repeat a node (jumps)
            left = self.ord[ids[k - 1]] if k > 0 else None
            right = self.ord[ids[j + 1]] if j + 1 < len(ids) else None
            if left is not None and right is not None and left < right:
                chosen = self._spread(left, right, len(run))
                if chosen is None:
                    self._renumber()
                    continue  # retry this run with fresh gaps
                for i, x in zip(run, chosen):
                    self._set(i, x)
            elif right is not None and left is None:
                for m, i in enumerate(reversed(run), start=1):
                    self._set(i, self._min - m)
                self._min -= len(run)
            # otherwise keep the appended orders (after everything, hence after `left`)
            k = j + 1

    def make_room(self, u: int, v: int, succ: Adjacency, pred: Adjacency) -> bool:
        """Make room for ``u -> v`` in the topological order, or report a cycle (Pearce–Kelly).

        ``F`` is what ``v`` reaches and ``B`` what reaches ``u``, both inside the order window
        ``(ord[v], ord[u])``; the edge closes a cycle exactly when they meet. The two searches
        advance in turn, the one with the shorter queue first, so a cycle is found after
        exploring about the region between the two ends (most refused edges of a batch), and
        an acceptable edge costs about the smaller of ``F`` and ``B``, not both.

        When ``F`` runs dry first, no cycle; ``F`` moves, in its own order, just above ``u``:
        below the lowest of its successors outside it, all of which lie above ``u``. When ``B``
        runs dry first, ``B`` moves just below ``v`` likewise. Only if floats cannot split that
        gap are both sides finished and ``B`` then ``F`` given their combined order slots, the
        classic Pearce–Kelly step, which needs no new values.
        """
        ord_ = self.ord
        lb, ub = ord_[v], ord_[u]
        if lb > ub:
            return True
        forward: dict[int, None] = {v: None}  # insertion-ordered sets: F and B
        backward: dict[int, None] = {u: None}
        f_queue, b_queue = deque((v,)), deque((u,))
        above = math.inf  # lowest order among F's successors outside F (all above ub)
        below = -math.inf  # highest order among B's predecessors outside B (all below lb)
        while f_queue and b_queue:
            if len(f_queue) <= len(b_queue):
                x = f_queue.popleft()
                for w in succ.get(x, ()):
                    if w in backward:  # v reaches w and w reaches u
                        return False
                    if w in forward:
                        continue
                    ow = ord_[w]
                    if ow < ub:
                        forward[w] = None
                        f_queue.append(w)
                    elif ow < above:
                        above = ow
            else:
                x = b_queue.popleft()
                for w in pred.get(x, ()):
                    if w in forward:
                        return False
                    if w in backward:
                        continue
                    ow = ord_[w]
                    if ow > lb:
                        backward[w] = None
                        b_queue.append(w)
                    elif ow > below:
                        below = ow
        # no cycle: move the side that ran dry past the other end
        if not f_queue:
            moved = sorted(forward, key=ord_.__getitem__)
            if above == math.inf:
                values = [self._next + m for m in range(len(moved))]
                self._next += len(moved)
            else:
                values = self._spread(ub, above, len(moved))
        else:
            moved = sorted(backward, key=ord_.__getitem__)
            if below == -math.inf:
                values = [self._min - len(moved) + m for m in range(len(moved))]
                self._min -= len(moved)
            else:
                values = self._spread(below, lb, len(moved))
        if values is not None:
            for x, value in zip(moved, values):
                self._set(x, value)
            return True
        # the gap is too narrow: finish both sides and swap their slots (no new values needed)
        for seen, queue, nbrs, inside in (
            (forward, f_queue, succ, lambda w: ord_[w] < ub),
            (backward, b_queue, pred, lambda w: ord_[w] > lb),
        ):
            while queue:
                x = queue.popleft()
                for w in nbrs.get(x, ()):
                    if w not in seen and inside(w):
                        seen[w] = None
                        queue.append(w)
        b_sorted = sorted(backward, key=ord_.__getitem__)
        f_sorted = sorted(forward, key=ord_.__getitem__)
        slots = sorted(ord_[x] for x in b_sorted + f_sorted)
        for x, slot in zip(b_sorted + f_sorted, slots):
            ord_[x] = slot
        return True

    def _spread(self, lo: float, hi: float, n: int) -> list[float] | None:
        """``n`` increasing unused orders strictly between ``lo`` and ``hi``, or ``None`` when the
        gap is too narrow for floats to split (or every phase collides)."""
        step = (hi - lo) / (n + 1)
        if step <= max(abs(lo), abs(hi), 1.0) * 1e-9:
            return None
        for phase in self._PHASES:
            chosen = [lo + (m + phase) * step for m in range(n)]
            if not any(x in self._values or not lo < x < hi for x in chosen):
                return chosen
        return None

    def _set(self, i: int, value: float) -> None:
        self._values.discard(self.ord[i])
        self.ord[i] = value
        self._values.add(value)

    def _renumber(self) -> None:
        for rank, i in enumerate(sorted(self.ord, key=self.ord.__getitem__)):
            self.ord[i] = float(rank)
        self._values = set(self.ord.values())
        self._next = float(len(self.ord))
        self._min = 0.0


def is_acyclic(nodes: Iterable[int], succ: Adjacency, pred: Adjacency) -> bool:
    """Check acyclicity from scratch (Kahn's algorithm), independently of any order."""
    indeg = {v: len(pred.get(v, {})) for v in nodes}
    queue = deque(v for v, d in indeg.items() if d == 0)
    seen = 0
    while queue:
        v = queue.popleft()
        seen += 1
        for w in succ.get(v, ()):
            indeg[w] -= 1
            if indeg[w] == 0:
                queue.append(w)
    return seen == len(indeg)
