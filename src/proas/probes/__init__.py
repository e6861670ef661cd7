"""The paper's motivation probes (docs/probes.md).

- ``snapshot``: exact environment snapshots by replay (reset + the action prefix; every proas env
  is deterministic), for any env and both household backends;
- ``sampler``: N continuations of a policy from one snapshot, batched;
- ``stats``: shares of unreasonable steps in successes and NA steps in failures over training;
- ``esr``: expected success rate with and without an injected segment of unreasonable actions
  (panel (b));
- ``fd``: recovered ESR after forbidding an action, against its Future-Drift (panel (c));
- ``report``: the tables (CSV, Markdown) and plots (PNG) the probes write.
"""
