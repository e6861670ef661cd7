"""The Agentic Reference Graph (ARG): a DAG over abstract states built from successful trajectories.

An edge is a ``(state, action, next_state)`` triple. A successful trajectory is first *cleaned*
(error steps dropped, loops cut: when a state recurs, the steps between its two visits are
removed), leaving a simple path from its start state to its goal state; clean paths are merged
edge by edge, and an edge that would close a cycle is not added. The graph keeps, per node, how
many trajectories support it and whether it is a goal (the last state of a successful
trajectory) and its shortest distance to a goal.

Evolving the graph with a batch touches only what the batch changes, so merging a batch into a
graph of ten thousand nodes costs a few milliseconds:

- acyclicity: the Pearce–Kelly dynamic topological order. An edge ``u -> v`` with
  ``ord[u] < ord[v]`` is accepted at once; otherwise a two-way search (forward from ``v``,
  backward from ``u``, both inside the order window between them) either meets, and the edge
  would close a cycle, or one side runs dry, and the window's affected nodes are reordered;
- goal distances: kept up to date as edges and goals arrive (distances only shrink then, so
  each addition relaxes backwards from where it happened); only ``prune``, which can lengthen
  them, leaves a full breadth-first recomputation to the next query.

The package, one module per seam; ``ReferenceGraph`` is the one class to use:

- ``store``: ``ReferenceGraph``, its storage (nodes, edges, supports, goals), queries,
  building (``add_trajectories``, ``add_batch``, ``add_path``, ``merge``), ``prune`` and
  ``copy``;
- ``paths``: ``clean_path``, the cleaning of one trajectory;
- ``order``: the dynamic topological order that refuses cycles;
- ``distances``: goal distances, from scratch and incrementally;
- ``files``: the JSON / gzip file format, and what ``load`` refuses (a file of more than
  ``MAX_GRAPH_BYTES`` of JSON, among others);
- ``export``: networkx, GraphML and DOT, which hold any state text.
"""

from proas.credit.graph.files import FORMAT, MAX_GRAPH_BYTES, VERSION, GraphFileError
from proas.credit.graph.paths import clean_path
from proas.credit.graph.store import ReferenceGraph

__all__ = ["FORMAT", "MAX_GRAPH_BYTES", "VERSION", "GraphFileError", "ReferenceGraph", "clean_path"]
