"""``proas inspect --html``: the terminal views as one self-contained static page, plus the ARG.

The page needs no network: its style, its script and cytoscape.js (3.35.0, MIT, the release's
own ``dist/cytoscape.min.js`` from the npm registry, vendored in ``vendor/`` with its licence)
are inlined. The reference graph is drawn for the inspected task's type only (abstract states
start with ``<task_type>|``): nodes sized by support, coloured by distance to the nearest goal
(green at a goal, red far away, grey when no goal is reachable), goals ringed; the states the
group's trajectories visited outside the graph are drawn dashed, their transitions outside
the graph as dashed edges. Clicking a trajectory row highlights its path and shows its steps.

Large graphs are capped at ``max_nodes``: the group's path states and the goals are always
kept, then the states with the highest support.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from importlib import resources
from itertools import pairwise
from typing import Any

from proas.inspect.view import KIND_NOTE, abbreviate, glyph, short_state, step_note
from proas.rollout_log import LoggedStep, LoggedTrajectory, RolloutLog

__all__ = ["DEFAULT_MAX_NODES", "arg_elements", "cytoscape_js", "path_states", "render_html"]

DEFAULT_MAX_NODES = 300
#: up to this many nodes the graph is laid out top-down (breadth-first), above it in rings by distance
BREADTHFIRST_MAX_NODES = 40


def cytoscape_js() -> str:
    return resources.files("proas.inspect").joinpath("vendor/cytoscape.min.js").read_text(encoding="utf-8")


def path_states(traj: LoggedTrajectory) -> list[str]:
    """The abstract states a trajectory went through, in order (``s_0, s_1, ..., s_T``)."""
    if not traj.steps:
        return []
    return [traj.steps[0].state] + [s.next_state for s in traj.steps]


def _distance_colour(d: float, dmax: float) -> str:
    if not math.isfinite(d):
        return "#b8b8b8"
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    return to_hex(colormaps["RdYlGn"](1.0 - (d / dmax if dmax > 0 else 0.0) * 0.9))


def arg_elements(
    graph, task_type: str | None, group: Sequence[LoggedTrajectory], max_nodes: int = DEFAULT_MAX_NODES
) -> dict[str, Any]:
    """Cytoscape elements for the subgraph of ``task_type`` and the group's paths.

    Returns ``{"nodes", "edges", "paths", "type_nodes", "shown_arg_nodes", "capped"}``: node
    data ``id, label, support, distance (None: no goal), goal, arg, color, size, ring`` (the
    concentric layout's level: goals highest, unreachable and outside states 0); edge data
    ``id, source, target, support, actions, arg, width``; ``paths[trajectory] = {"nodes",
    "edges"}`` (ids on the trajectory's path).
    """
    prefix = f"{task_type}|" if task_type else ""
    type_nodes = [n for n in graph.nodes() if n.startswith(prefix)]
    in_graph = set(type_nodes)
    visited: list[str] = []
    for t in group:
        for s in path_states(t):
            if s not in visited:
                visited.append(s)
    if len(type_nodes) > max_nodes:
        keep = [s for s in visited if s in in_graph]
        keep += [g for g in graph.goals() if g in in_graph and g not in keep]
        chosen = set(keep)
        rest = sorted((n for n in type_nodes if n not in chosen), key=lambda n: (-graph.support(n), n))
        keep += rest[: max(0, max_nodes - len(keep))]
        shown = set(keep)
    else:
        shown = in_graph
    order = [n for n in type_nodes if n in shown]
    off_graph = [s for s in visited if s not in graph]

    dists = {n: graph.distance(n) for n in order}
    finite = [d for d in dists.values() if math.isfinite(d)]
    dmax = max(finite) if finite else 0.0
    smax = max((graph.support(n) for n in order), default=1) or 1
    nodes = []
    for n in order:
        sup = graph.support(n)
        d = dists[n]
        nodes.append({
            "id": n, "label": short_state(n, task_type).replace("|", "\n"), "support": sup,
            "distance": d if math.isfinite(d) else None, "goal": graph.is_goal(n), "arg": True,
            "color": _distance_colour(d, dmax), "size": round(18 + 42 * math.sqrt(sup / smax), 1),
            "ring": dmax + 1 - d if math.isfinite(d) else 0,
        })
    for n in off_graph:
        nodes.append({
            "id": n, "label": short_state(n, task_type).replace("|", "\n"), "support": 0, "distance": None,
            "goal": False, "arg": False, "color": "#ffffff", "size": 16, "ring": 0,
        })

    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for u, action, v, sup in graph.edges():
        if u in shown and v in shown:
            e = merged.setdefault((u, v), {"support": 0, "actions": []})
            e["support"] += sup
            e["actions"].append(action)
    all_ids = {n["id"] for n in nodes}
    for t in group:
        for s in t.steps:
            key = (s.state, s.next_state)
            if s.state != s.next_state and key not in merged and s.state in all_ids and s.next_state in all_ids:
                merged[key] = {"support": 0, "actions": [s.action], "arg": False}
    esmax = max((e["support"] for e in merged.values()), default=1) or 1
    edges, edge_id = [], {}
    for k, ((u, v), e) in enumerate(merged.items()):
        eid = f"e{k}"
        edge_id[(u, v)] = eid
        acts = e["actions"]
        edges.append({
            "id": eid, "source": u, "target": v, "support": e["support"], "arg": e.get("arg", True),
            "actions": "; ".join(acts[:3]) + (f"; … ({len(acts)} actions)" if len(acts) > 3 else ""),
            "width": round(1 + 4 * e["support"] / esmax, 2),
        })
    paths = {}
    for t in group:
        states = path_states(t)
        pn = list(dict.fromkeys(s for s in states if s in all_ids))
        pe = list(dict.fromkeys(edge_id[(a, b)] for a, b in pairwise(states) if (a, b) in edge_id))
        paths[t.trajectory] = {"nodes": pn, "edges": pe}
    return {
        "nodes": nodes, "edges": edges, "paths": paths, "type_nodes": len(type_nodes),
        "shown_arg_nodes": len(order), "capped": len(order) < len(type_nodes),
    }


# ---------------------------------------------------------------------------- page


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _num(x: float) -> str:
    return f"{x:+.3f}"


def _step_classes(s: LoggedStep) -> str:
    sign = "pos" if s.shaped > 0 else "neg" if s.shaped < 0 else "zero"
    return f"k-{s.kind} {sign}"


def _strip(t: LoggedTrajectory) -> str:
    cells = []
    for s in t.steps:
        tip = (
            f"t={s.t}: {s.action} | Rea {s.rea} PA {s.pa} FD {s.fd:g} | "
            f"base {_num(s.base_advantage)} → {_num(s.advantage)}"
        )
        note = step_note(s)
        if note:
            tip += f" | {note}"
        cells.append(f'<span class="cell {_step_classes(s)}" title="{_e(tip)}">{glyph(s)}</span>')
    return "".join(cells)


def _overview(log: RolloutLog, current_group: str) -> str:
    rows = []
    for gid, members in log.groups().items():
        kinds = [s.kind for t in members for s in t.steps]
        cls = ' class="current"' if gid == current_group else ""
        rows.append(
            f"<tr{cls}><td>{_e(gid)}</td><td>{_e(members[0].task_id)}</td><td>{_e(members[0].task_type or '')}</td>"
            f"<td>{len(members)}</td><td>{sum(t.success for t in members)}/{len(members)}</td>"
            f"<td>{sum(len(t) for t in members) / len(members):.1f}</td><td>{kinds.count('masked')}</td>"
            f"<td>{kinds.count('up')}</td><td>{kinds.count('down')}</td></tr>"
        )
    head = "".join(
        f"<th>{h}</th>" for h in ("group", "task", "type", "G", "success", "mean steps", "masked", "APR ↑", "APR ↓")
    )
    return f'<table id="overview"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _group(group: Sequence[LoggedTrajectory]) -> str:
    rows = []
    for t in group:
        a = t.traj_advantage
        rows.append(
            f'<tr class="traj-row" data-traj="{_e(t.trajectory)}"><td>{_e(t.trajectory)}</td>'
            f"<td>{'✓' if t.success else '✗'}</td><td>{t.reward:g}</td>"
            f'<td class="{"pos" if a > 0 else "neg" if a < 0 else ""}">{_num(a)}</td><td>{len(t)}</td>'
            f'<td class="strip">{_strip(t)}</td></tr>'
        )
    head = "".join(f"<th>{h}</th>" for h in ("trajectory", "won", "R", "A_i", "T", "credit per step"))
    return f'<table id="group"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _detail(t: LoggedTrajectory) -> str:
    rows = []
    for s in t.steps:
        obs = s.observation or ""
        rows.append(
            f'<tr class="row-{s.kind}"><td>{s.t}</td>'
            f'<td class="obs" title="{_e(obs)}">{_e(abbreviate(obs, 90))}</td>'
            f"<td>{_e(s.action)}{' <em>(error)</em>' if s.error else ''}</td>"
            f'<td class="state">{_e(short_state(s.next_state, t.task_type))}</td>'
            f"<td>{s.rea}</td><td>{s.pa}</td><td>{s.fd:g}</td>"
            f"<td>{'✓' if s.uniform else ''}</td><td>{_num(s.base_advantage)}</td>"
            f'<td class="adv {_step_classes(s)}">{_num(s.advantage)}</td>'
            f'<td class="note {_step_classes(s)}">{_e(step_note(s))}</td></tr>'
        )
    head = "".join(
        f"<th>{h}</th>"
        for h in ("t", "observation", "action", "next state", "Rea", "PA", "FD", "U", "base", "shaped", "note")
    )
    title = (f"trajectory {_e(t.trajectory)}: {'won' if t.success else 'failed'}, R = {t.reward:g}, "
             f"A<sub>i</sub> = {_num(t.traj_advantage)}, {len(t)} steps")
    return (f'<div class="traj-detail" data-traj="{_e(t.trajectory)}" hidden><h3>{title}</h3>'
            f'<table class="steps"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>')


_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:1.2em 2em;color:#1f2328;font-size:14px}
h1{font-size:1.4em} h2{font-size:1.15em;margin-top:1.6em} h3{font-size:1em}
table{border-collapse:collapse;margin:.4em 0} th,td{padding:2px 8px;border-bottom:1px solid #e5e7eb;text-align:left;vertical-align:top}
th{background:#f6f8fa} tr.current td{background:#fff8c5}
.pos{color:#1a7f37} .neg{color:#cf222e} .zero{color:#57606a}
.k-up{font-weight:700} .k-down{opacity:.6} .k-masked,.k-zeroed{color:#8c959f;text-decoration:line-through}
table.steps tr.row-masked td,table.steps tr.row-zeroed td{background:#f3f4f6}
table.steps tr.row-up td{background:#fff1ef} td.note{white-space:nowrap} td.note.k-masked,td.note.k-zeroed{text-decoration:none}
td.obs{max-width:34em;white-space:nowrap;overflow:hidden;text-overflow:ellipsis;color:#57606a} td.state{font-family:monospace;font-size:12px}
td.strip{font-family:monospace;font-size:15px;letter-spacing:1px} .cell{cursor:help}
tr.traj-row{cursor:pointer} tr.traj-row:hover td{background:#f6f8fa} tr.traj-row.selected td{background:#ddf4ff}
#cy{width:100%;height:620px;border:1px solid #d0d7de;border-radius:6px;background:#fff}
#nodeinfo{font-family:monospace;font-size:12px;min-height:2.5em;margin:.4em 0;white-space:pre-wrap}
.legend span{margin-right:1.2em} .muted{color:#57606a}
"""  # noqa: E501 (page content, written out as is)

_JS = r"""
(function () {
  var data = JSON.parse(document.getElementById('proas-data').textContent);
  var g = data.graph;
  var els = [];
  g.nodes.forEach(function (n) {
    els.push({group: 'nodes', data: n, classes: (n.goal ? 'goal ' : '') + (n.arg ? '' : 'offgraph')});
  });
  g.edges.forEach(function (e) {
    els.push({group: 'edges', data: e, classes: e.arg ? '' : 'offarg'});
  });
  var cy = cytoscape({
    container: document.getElementById('cy'),
    elements: els,
    minZoom: 0.05,
    maxZoom: 4,
    style: [
      {selector: 'node', style: {'background-color': 'data(color)', 'width': 'data(size)', 'height': 'data(size)',
        'label': 'data(label)', 'font-size': 7, 'text-wrap': 'wrap', 'text-valign': 'bottom', 'text-margin-y': 2,
        'color': '#444', 'border-width': 1, 'border-color': '#666'}},
      {selector: 'node.goal', style: {'border-width': 4, 'border-color': '#1a7f37', 'shape': 'round-rectangle'}},
      {selector: 'node.offgraph', style: {'border-style': 'dashed', 'border-width': 2, 'border-color': '#8c959f'}},
      {selector: 'edge', style: {'curve-style': 'bezier', 'target-arrow-shape': 'triangle', 'width': 'data(width)',
        'line-color': '#c4c9cf', 'target-arrow-color': '#c4c9cf', 'arrow-scale': 0.8}},
      {selector: 'edge.offarg', style: {'line-style': 'dashed', 'width': 1.5}},
      {selector: '.faded', style: {'opacity': 0.3}},
      {selector: 'node.onpath', style: {'border-width': 4, 'border-color': '#0969da', 'opacity': 1, 'z-index': 10}},
      {selector: 'edge.onpath', style: {'line-color': '#0969da', 'target-arrow-color': '#0969da', 'width': 4,
        'opacity': 1, 'z-index': 10}}
    ]
  });
  // a small graph reads best top-down from its start states; a large one in rings around the goals
  // (one ring per distance, unreachable and outside states outermost), which stays legible when wide
  if (cy.nodes().length <= data.layout_threshold) {
    var roots = cy.nodes().roots();
    cy.layout({name: 'breadthfirst', directed: true, roots: roots.length ? roots : undefined, spacingFactor: 0.85,
               animate: false}).run();
  } else {
    cy.layout({name: 'concentric', concentric: function (n) { return n.data('ring'); }, levelWidth: function () { return 1; },
               minNodeSpacing: 6, avoidOverlap: true, animate: false}).run();
  }
  cy.fit(undefined, 20);

  var info = document.getElementById('nodeinfo');
  cy.on('tap', 'node', function (evt) {
    var d = evt.target.data();
    info.textContent = d.id + '\nsupport ' + d.support + ', distance to goal ' +
      (d.distance === null ? 'none reachable' : d.distance) + (d.goal ? ', goal' : '') +
      (d.arg ? '' : ', not in the reference graph');
  });
  cy.on('tap', 'edge', function (evt) {
    var d = evt.target.data();
    info.textContent = d.actions + '\nsupport ' + d.support + (d.arg ? '' : ', not in the reference graph');
  });

  function select(traj) {
    var p = g.paths[traj];
    if (!p) { return false; }
    cy.elements().removeClass('onpath').addClass('faded');
    p.nodes.forEach(function (id) { cy.getElementById(id).removeClass('faded').addClass('onpath'); });
    p.edges.forEach(function (id) { cy.getElementById(id).removeClass('faded').addClass('onpath'); });
    document.querySelectorAll('.traj-detail').forEach(function (el) { el.hidden = el.dataset.traj !== traj; });
    document.querySelectorAll('tr.traj-row').forEach(function (el) {
      el.classList.toggle('selected', el.dataset.traj === traj);
    });
    document.getElementById('selected-name').textContent = traj;
    api.selected = traj;
    return true;
  }
  document.querySelectorAll('tr.traj-row').forEach(function (el) {
    el.addEventListener('click', function () { select(el.dataset.traj); });
  });
  var api = {cy: cy, data: data, select: select, selected: null, ready: false};
  window.proasInspect = api;
  select(data.selected);
  api.ready = true;
})();
"""  # noqa: E501 (page content, written out as is)


def render_html(
    log: RolloutLog,
    group: Sequence[LoggedTrajectory],
    selected: LoggedTrajectory,
    graph,
    graph_source: str,
    max_nodes: int = DEFAULT_MAX_NODES,
) -> str:
    """The whole page as one string (every script and style inline)."""
    task_type = selected.task_type
    elements = arg_elements(graph, task_type, group, max_nodes=max_nodes)
    payload = {"step": log.step, "group": selected.group, "selected": selected.trajectory, "graph": elements,
               "layout_threshold": BREADTHFIRST_MAX_NODES}
    blob = json.dumps(payload, separators=(",", ":")).replace("<", "\\u003c")
    first = group[0]
    n_off = sum(1 for n in elements["nodes"] if not n["arg"])
    cap_note = (f"; capped at {max_nodes}: the group's states, the goals, then the highest support"
                if elements["capped"] else "")
    graph_note = (f"{elements['shown_arg_nodes']} of the {elements['type_nodes']} states of type "
                  f"<code>{_e(task_type or 'all')}</code> from <code>{_e(graph_source)}</code>{cap_note}; "
                  f"{n_off} states the group visited outside the graph (dashed)")
    legend = (
        '<p class="legend"><span>● advancing (PA = 1)</span><span>○ reasonable, not advancing</span>'
        "<span>✗ unreasonable (Rea = 0)</span>"
        '<span class="pos">positive</span><span class="neg">negative</span>'
        '<span class="neg k-up">APR up-weighted</span><span class="neg k-down">APR down-weighted</span>'
        f'<span class="k-masked">{_e(KIND_NOTE["masked"])}</span></p>'
    )
    graph_legend = (
        '<p class="legend muted"><span>node size: support</span><span>colour: distance to goal '
        '(green near, red far, grey none)</span><span>square, green ring: goal</span>'
        '<span>blue: the selected trajectory\'s path</span><span>dashed: outside the reference graph</span></p>'
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>proas inspect: step {log.step}, task {_e(first.task_id)}</title>
<style>{_CSS}</style>
<script>{cytoscape_js()}</script>
</head><body>
<h1>proas inspect — RL step {log.step}</h1>
<p class="muted">{len(log.trajectories)} trajectories in {len(log.groups())} tasks, from <code>{_e(log.path)}</code></p>
<h2>Tasks of the batch</h2>
{_overview(log, first.group)}
<h2>Task {_e(first.task_id)} ({_e(first.task_type or 'no type')}), group {_e(first.group)}</h2>
<p class="muted">Click a row to inspect that trajectory; hover a step for its credit.</p>
{_group(group)}
{legend}
<h2>Reference graph — path of <span id="selected-name"></span></h2>
<p class="muted">{graph_note}</p>
{graph_legend}
<div id="cy"></div>
<div id="nodeinfo" class="muted">Click a state or a transition for its details.</div>
<h2>Steps</h2>
{"".join(_detail(t) for t in group)}
<script id="proas-data" type="application/json">{blob}</script>
<script>{_JS}</script>
</body></html>
"""
