"""``ProASCredit``: ProAS inside a verl trainer, and the reference graph's life beside it.

One object per training run, held by the driver (the process that runs ``fit``). After verl's
``compute_advantage`` it reshapes the batch's ``advantages`` in place:

1. the step rows become the credit layer's flat arrays (``rows.rows_to_batch``: the
   ``CreditBatch`` of their trajectories, without a Python object per step);
2. the batch's successful trajectories are merged into the graph (the evolving ARG; off with
   ``evolve=False``), then ``proas.credit.credit_arrays``, the one place an advantage is made,
   runs the base estimator (with ``base="verl"``: the ``external`` estimator, whose input is
   verl's own advantage), annotates every step against the graph, applies the shaping and
   charges the invalid-action penalty: what ``compute_credit`` does on trajectories;
3. every response token of a step row gets its step's advantage, times ``response_mask``.

The graph is saved with each trainer checkpoint (``save_checkpoint(global_step_dir)``) and
restored from the latest one on resume (``resume(default_local_dir)``), reading verl's own
``latest_checkpointed_iteration.txt``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from proas.credit import (
    ESTIMATORS,
    REA_RULES,
    SHAPINGS,
    CreditResult,
    InvalidActionPenalty,
    ReferenceGraph,
    credit_arrays,
)
from proas.errors import ProasError
from proas.fileio import atomic_write_json, read_regular
from proas.integrations.verl.rows import (
    BatchLayout,
    StepColumns,
    _as_bool,
    broadcast_to_tokens,
    response_mask_of,
    rows_to_batch,
)

__all__ = ["ProASCredit", "CHECKPOINT_SUBDIR", "VERL_TRACKER_FILE"]

#: the folder that ``save_checkpoint`` writes inside a verl ``global_step_N`` folder
CHECKPOINT_SUBDIR = "proas"
#: the file where verl's trainers record the step of the latest checkpoint
VERL_TRACKER_FILE = "latest_checkpointed_iteration.txt"
_STATE_FORMAT = "proas-verl-credit"
_STATE_VERSION = 1

#: base estimators that reshape per step: all of proas's but those that read ``V(s_t)``; GAE
#: works on tokens inside verl and ProAS leaves it unchanged anyway (no step is credited
#: uniformly), so it stays verl's.
HOOK_ESTIMATORS = tuple(name for name, spec in ESTIMATORS.items() if not spec.needs_values and not spec.external)
#: where ``A_i`` comes from: proas's estimator on the batch's trajectories, or verl's advantage
BASES = ("proas", "verl")
#: estimators whose verl advantage is one value per row and per trajectory up to row-level
#: reward terms, so that ``base="verl"`` can split it into ``A_i`` and a residual
VERL_BASE_ESTIMATORS = tuple(name for name in HOOK_ESTIMATORS if ESTIMATORS[name].outcome_only)
#: verl-agent's ``actor_rollout_ref.actor.invalid_action_penalty_coef`` default
DEFAULT_INVALID_ACTION_PENALTY = 0.1


class ProASCredit:
    """ProAS reshaping for verl batches, with the reference graph it builds, evolves and saves.

    Args:
        graph: the initial Agentic Reference Graph (e.g. built from oracle trajectories with
            ``ReferenceGraph.from_trajectories`` and saved); ``None`` starts empty and grows
            from the run's own successes.
        estimator: proas base estimator computing ``A_i``, ``B_{i,t}``, ``U_{i,t}`` from the
            batch's trajectories: one of ``HOOK_ESTIMATORS``.
        estimator_options: passed to it, e.g. ``{"group_stats": "trajectories"}`` for one
            sample per trajectory instead of verl-agent's every-step-row group statistics (the
            default), ``{"norm_by_std": False}`` for Dr. GRPO,
            ``{"gamma": 0.95, "mode": "mean_std_norm"}`` for GiGPO.
        shaping: ``"proas"`` or an ablation name (``proas.credit.SHAPINGS``).
        shaping_options: ``epsilon`` (APR's ε), ``progress_coef``.
        evolve: merge each batch's successful trajectories into the graph (the paper's
            dynamically evolving ARG); ``False`` is the ``static`` ablation.
        columns: the ``non_tensor_batch`` column names (verl-agent's by default).
        seed: seeds the ``random`` ablation; batch ``k`` uses ``seed + k``.
        rea: the reasonableness rule (``proas.credit.REA_RULES``; ``transition`` by default).
        base: ``"proas"`` (default): ``A_i`` from proas's ``estimator`` on the batch's
            trajectories, so the result equals ``compute_credit``. ``"verl"``: reshape the
            advantage verl already computed (``batch["advantages"]``, one value per row), for
            outcome estimators (``VERL_BASE_ESTIMATORS``): ``A_i`` is the mean of the
            trajectory's step values and the rest (e.g. verl-agent's invalid-action penalty)
            stays as a per-step residual added back unchanged, like GiGPO's ``B_{i,t}``.
        invalid_action_penalty: verl-agent's ``invalid_action_penalty_coef`` (0.1, its
            default). With ``base="proas"`` every step whose ``is_action_valid`` (the
            ``columns.valid`` column: verl-agent's format check, whatever ``columns.error``
            says) is false gets ``step_penalty = coef`` in the estimator (subtracted from the
            row's score before the group statistics, and from GiGPO's step return), which is
            what verl-agent's ``apply_invalid_action_penalty`` does to the rows before its
            ``compute_advantage``. Applies to the estimators that take ``step_penalty`` (GRPO,
            DAPO, GiGPO, MiGPO); ``0`` turns it off (verl-agent's ``use_invalid_action_penalty=False``).
            With ``base="verl"`` the penalty is already in verl's advantage and this is unused.
    """

    def __init__(
        self,
        graph: ReferenceGraph | None = None,
        *,
        estimator: str = "grpo",
        estimator_options: Mapping[str, Any] | None = None,
        shaping: str = "proas",
        shaping_options: Mapping[str, Any] | None = None,
        evolve: bool = True,
        columns: StepColumns | None = None,
        seed: int = 0,
        base: str = "proas",
        rea: str = "transition",
        invalid_action_penalty: float = DEFAULT_INVALID_ACTION_PENALTY,
    ) -> None:
        if rea not in REA_RULES:
            raise ProasError(f"unknown rea rule {rea!r}; choose one of: {', '.join(REA_RULES)}")
        if base not in BASES:
            raise ProasError(f"unknown base {base!r}; choose one of: {', '.join(BASES)}")
        if base == "verl" and estimator not in VERL_BASE_ESTIMATORS:
            raise ProasError(
                f"base='verl' needs one advantage per trajectory from verl; {estimator!r} is not one of "
                f"{', '.join(VERL_BASE_ESTIMATORS)} (use base='proas' for GiGPO)"
            )
        if base == "verl" and shaping in SHAPINGS and SHAPINGS[shaping].reward_bonus:
            raise ProasError(f"shaping {shaping!r} changes the rewards before the estimator; use base='proas'")
        if estimator not in HOOK_ESTIMATORS:
            raise ProasError(
                f"estimator {estimator!r} cannot be reshaped inside verl; choose one of: "
                f"{', '.join(HOOK_ESTIMATORS)} (PPO/GAE stays verl's own: ProAS leaves it unchanged)"
            )
        if shaping not in SHAPINGS:
            raise ProasError(f"unknown shaping {shaping!r}; choose one of: {', '.join(SHAPINGS)}")
        if "step_penalty" in (estimator_options or {}):
            raise ProasError("step_penalty is computed per batch from is_action_valid; "
                             "set invalid_action_penalty instead")
        # a typo in the options should fail at start-up, not after the first rollout
        try:
            ESTIMATORS[estimator].check(estimator_options or {})
        except ValueError as exc:
            raise ProasError(f"bad estimator_options for {estimator!r}: {exc}") from None
        penalty = float(invalid_action_penalty)
        if not np.isfinite(penalty) or penalty < 0:
            raise ProasError(f"invalid_action_penalty must be a finite number >= 0, got {invalid_action_penalty!r}")
        try:
            SHAPINGS[shaping].check(shaping_options or {})
        except ValueError as exc:
            raise ProasError(f"bad shaping_options: {exc}") from None
        self.graph = graph if graph is not None else ReferenceGraph()
        self.estimator = estimator
        self.estimator_options = dict(estimator_options or {})
        self.shaping = shaping
        self.shaping_options = dict(shaping_options or {})
        self.evolve = bool(evolve)
        self.columns = columns or StepColumns()
        self.seed = int(seed)
        self.base = base
        self.rea = rea
        self.invalid_action_penalty = penalty
        #: number of batches reshaped so far (restored on resume)
        self.batches_seen = 0
        #: the last batch's layout and credit, for inspection and logging
        self.last_layout: BatchLayout | None = None
        self.last_result: CreditResult | None = None
        #: envs whose task draws the checkpoints keep (``attach_envs``)
        self.envs: list[Any] = []

    def attach_envs(self, *managers: Any) -> None:
        """Keep the task draws of these envs in the checkpoints, so that a resumed run draws the
        tasks the uninterrupted one would have: each manager, or the vectorised env on its
        ``envs`` (verl-agent's managers), that has ``state_dict``/``load_state_dict`` (proas's
        ``ProasEnvManager`` and ``ProasVecEnv``; ``AlfworldLockstep`` and ``WebshopPages`` around
        verl-agent's ALFWorld and WebShop envs, which keep their game and goal draws). Other
        envs draw afresh from their seed after a resume."""
        for manager in managers:
            for candidate in (manager, getattr(manager, "envs", None)):
                if hasattr(candidate, "state_dict") and hasattr(candidate, "load_state_dict"):
                    self.envs.append(candidate)
                    break

    # ------------------------------------------------------------------ config
    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> "ProASCredit":
        """Build from a mapping such as a verl YAML's ``proas:`` section (docs/verl.md).

        Keys: ``graph`` (path of a saved graph, optional), ``estimator``, ``estimator_options``,
        ``shaping``, ``shaping_options``, ``evolve``, ``columns``, ``seed``, ``base``, ``rea``,
        ``invalid_action_penalty``; ``enable`` is the trainer's switch (the verl-agent recipe's
        ``proas.enable``) and is not read here. Unknown keys raise.
        """
        try:
            from omegaconf import DictConfig, OmegaConf

            if isinstance(cfg, DictConfig):
                cfg = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
        except ImportError:  # pragma: no cover - omegaconf is a proas dependency
            pass
        if not isinstance(cfg, Mapping):
            raise ProasError(f"proas config must be a mapping, got {type(cfg).__name__}")
        known = {
            "graph", "estimator", "estimator_options", "shaping", "shaping_options",
            "evolve", "columns", "seed", "base", "rea", "invalid_action_penalty", "enable",
        }
        unknown = sorted(set(cfg) - known)
        if unknown:
            raise ProasError(f"unknown proas config key(s) {unknown}; valid: {sorted(known)}")
        if "estimator" in cfg and cfg["estimator"] is None:
            # the verl-agent recipe's YAML leaves it null for trainer_credit to fill from
            # algorithm.adv_estimator; a bare from_config cannot guess it
            raise ProasError("proas.estimator is null: name it, or build the credit with "
                             "proas.integrations.verl.verl_agent.trainer_credit(config), which takes "
                             "it from algorithm.adv_estimator")
        graph_path = cfg.get("graph")
        graph = ReferenceGraph.load(graph_path) if graph_path else None
        return cls(
            graph,
            estimator=str(cfg.get("estimator", "grpo")),
            estimator_options=cfg.get("estimator_options") or {},
            shaping=str(cfg.get("shaping", "proas")),
            shaping_options=cfg.get("shaping_options") or {},
            evolve=bool(cfg.get("evolve", True)),
            columns=StepColumns.from_mapping(cfg.get("columns")),
            seed=int(cfg.get("seed", 0)),
            base=str(cfg.get("base", "proas")),
            rea=str(cfg.get("rea", "transition")),
            invalid_action_penalty=float(
                DEFAULT_INVALID_ACTION_PENALTY if cfg.get("invalid_action_penalty") is None
                else cfg["invalid_action_penalty"]
            ),
        )

    # ------------------------------------------------------------------ credit
    def step_advantages(self, non_tensor_batch: Mapping[str, Any], row_base: np.ndarray | None = None) -> np.ndarray:
        """``(bs,)`` the ProAS advantage of every step row; evolves the graph (if on) once.

        ``row_base`` is verl's advantage per row, needed (only) with ``base="verl"``. Copies of
        a step (batch padding) get the same value.
        """
        # arrays from the columns straight to the credit kernels: a Step object per row cost
        # more than all the credit arithmetic (docs/verl.md, "Cost")
        layout = rows_to_batch(non_tensor_batch, self.columns)
        batch = layout.batch
        estimator, options, penalty = self.estimator, dict(self.estimator_options), None
        if self.base == "verl":
            if row_base is None:
                raise ProasError("base='verl' reshapes verl's advantages: the batch has none yet")
            # verl's advantage, which holds verl-agent's invalid-action penalty already, enters
            # as the ``external`` estimator's input
            estimator, options = "external", {"advantage": self._step_values(layout, np.asarray(row_base, np.float64))}
        else:
            penalty = self._penalty(non_tensor_batch, layout)
        try:
            if self.evolve:
                self.graph.add_batch(batch)
            result = credit_arrays(
                batch,
                self.graph,
                estimator=estimator,
                shaping=self.shaping,
                estimator_options=options,
                shaping_options=self.shaping_options,
                seed=self.seed + self.batches_seen,
                rea=self.rea,
                penalty=penalty,
            )
        except (TypeError, ValueError) as exc:  # bad estimator/shaping options
            raise ProasError(f"ProAS credit failed: {exc}") from None
        self.batches_seen += 1
        self.last_layout, self.last_result = layout, result
        return result.final[layout.row_to_step]

    def _penalty(self, non_tensor_batch: Mapping[str, Any], layout: BatchLayout) -> InvalidActionPenalty | None:
        """verl-agent's invalid-action penalty of every step, for ``credit_arrays`` to charge; ``None``
        when it does not apply (coefficient 0, no validity column). The estimators that take
        ``step_penalty`` (GRPO, DAPO, GiGPO, MiGPO) take it in the row's score, as verl-agent's
        ``apply_invalid_action_penalty`` does; RLOO and REINFORCE++ are not charged it here
        (``otherwise="none"``: docs/verl.md)."""
        name = self.columns.valid
        if self.invalid_action_penalty == 0 or name is None or name not in non_tensor_batch:
            return None
        valid = _flags(non_tensor_batch[name])
        # copies of a step carry the same flag; any row of a step gives the step's
        step_valid = np.ones(layout.n_steps, dtype=bool)
        step_valid[layout.row_to_step] = valid
        return InvalidActionPenalty(self.invalid_action_penalty, ~step_valid, otherwise="none")

    @staticmethod
    def _step_values(layout: BatchLayout, row_base: np.ndarray) -> np.ndarray:
        """``(S,)`` verl's per-row advantage as one value per step (the mean over a step's copies)."""
        n_rows = len(layout.row_to_step)
        if row_base.shape != (n_rows,):
            raise ProasError(f"expected one verl advantage per row ({n_rows}), got shape {row_base.shape}")
        # copies of a step carry the same value in verl; average in case they do not
        count = np.bincount(layout.row_to_step, minlength=layout.n_steps)
        return np.bincount(layout.row_to_step, weights=row_base, minlength=layout.n_steps) / np.maximum(count, 1)

    def reshape(self, data: Any) -> dict[str, float]:
        """Reshape ``data.batch['advantages']`` (and ``returns``) of a verl ``DataProto`` in place.

        Call it right after verl's ``compute_advantage``. With ``base="proas"`` the advantages
        verl computed are replaced by proas's base estimator + ProAS shaping on the same
        trajectories; with the default every-step-row group statistics that base equals
        verl-agent's GRPO / GiGPO (tests/test_verl_parity.py). With ``base="verl"`` verl's own
        advantage is reshaped. Returns metrics to log (``proas/...``).
        """
        mask = response_mask_of(data.batch)
        old = data.batch.get("advantages", None) if hasattr(data.batch, "get") else None
        row_base = None
        if self.base == "verl" and old is not None:
            row_base = first_response_values(old, mask)
        row_adv = self.step_advantages(data.non_tensor_batch, row_base)
        adv = broadcast_to_tokens(row_adv, mask)
        if old is not None:
            adv = adv.to(old.dtype)
        data.batch["advantages"] = adv
        # outcome estimators have no critic: verl sets returns = advantages, and so do we
        data.batch["returns"] = adv.clone()
        return self.metrics()

    def metrics(self) -> dict[str, float]:
        """Figures of the last batch and of the graph, under ``proas/`` keys."""
        res, layout = self.last_result, self.last_layout
        out = {
            "proas/graph_nodes": float(self.graph.num_nodes),
            "proas/graph_edges": float(self.graph.num_edges),
            "proas/batches_seen": float(self.batches_seen),
        }
        if res is not None and layout is not None and len(res.advantage):
            out.update(
                {
                    "proas/reasonable_rate": float(np.mean(res.rea)),
                    "proas/advancing_rate": float(np.mean(res.pa)),
                    "proas/future_drift_mean": float(np.mean(res.fd)),
                    "proas/changed_step_rate": float(
                        np.mean(~np.isclose(res.advantage, res.base_advantage))
                    ),
                    "proas/duplicate_rows": float(layout.n_duplicate_rows),
                }
            )
        return out

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, checkpoint_dir: str | os.PathLike) -> Path:
        """Write the graph and the counters into ``checkpoint_dir/proas/`` (atomically).

        ``checkpoint_dir`` is verl's ``{default_local_dir}/global_step_{N}``; call it where the
        trainer saves its own checkpoint. Returns the folder written.
        """
        out = Path(checkpoint_dir) / CHECKPOINT_SUBDIR
        out.mkdir(parents=True, exist_ok=True)
        self.graph.save(out / "graph.json.gz")
        atomic_write_json(
            out / "state.json",
            {
                "format": _STATE_FORMAT,
                "version": _STATE_VERSION,
                "batches_seen": self.batches_seen,
                "estimator": self.estimator,
                "shaping": self.shaping,
                "evolve": self.evolve,
                "seed": self.seed,
                "invalid_action_penalty": self.invalid_action_penalty,
                "envs": [env.state_dict() for env in self.envs],
            },
        )
        return out

    def load_checkpoint(self, checkpoint_dir: str | os.PathLike) -> None:
        """Restore the graph and counters written by ``save_checkpoint`` into ``checkpoint_dir``."""
        folder = Path(checkpoint_dir) / CHECKPOINT_SUBDIR
        state_path = folder / "state.json"
        try:
            # a regular file (a FIFO would block the resume), read as verl's checkpoint may hold links
            state = json.loads(read_regular(state_path, follow_symlinks=True).decode("utf-8"))
        except FileNotFoundError:
            raise ProasError(f"no ProAS checkpoint in {checkpoint_dir} ({state_path} is missing)") from None
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:  # ValueError: too many digits
            raise ProasError(f"{state_path}: corrupt ProAS checkpoint state ({type(exc).__name__})") from None
        if not isinstance(state, dict) or state.get("format") != _STATE_FORMAT:
            raise ProasError(f"{state_path}: not a ProAS checkpoint state")
        if state.get("version") != _STATE_VERSION:
            raise ProasError(f"{state_path}: unsupported version {state.get('version')!r}")
        seen = state.get("batches_seen")
        if not isinstance(seen, int) or seen < 0:
            raise ProasError(f"{state_path}: bad batches_seen {seen!r}")
        envs = state.get("envs", [])
        if not isinstance(envs, list):
            raise ProasError(f"{state_path}: bad envs {str(envs)[:40]!r} (a list of env draw states)")
        if self.envs and envs and len(envs) != len(self.envs):
            raise ProasError(f"{state_path}: {len(envs)} env draw states for {len(self.envs)} attached envs")
        graph = ReferenceGraph.load(folder / "graph.json.gz")
        if self.envs and envs:
            for env, env_state in zip(self.envs, envs):
                env.load_state_dict(env_state)
        self.graph, self.batches_seen = graph, seen

    def resume(self, default_local_dir: str | os.PathLike) -> int | None:
        """Load the ProAS state of verl's latest checkpoint under ``default_local_dir``.

        Reads verl's ``latest_checkpointed_iteration.txt``; returns the step resumed from, or
        ``None`` when there is no checkpoint yet (a fresh run keeps its initial graph).
        """
        tracker = Path(default_local_dir) / VERL_TRACKER_FILE
        if not tracker.exists():
            return None
        try:
            text = read_regular(tracker, follow_symlinks=True).decode("utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:  # read_regular's own refusals are one line already
            raise ProasError(f"{tracker}: cannot be read ({type(exc).__name__})") from None
        try:
            step = int(text)
        except ValueError:
            raise ProasError(f"{tracker}: expected a step number, got {text[:40]!r}") from None
        self.load_checkpoint(Path(default_local_dir) / f"global_step_{step}")
        return step


def _truthy(value: Any) -> bool:
    # verl-agent stores numpy bools in object arrays; a None (a finished env's row that was not
    # dropped) counts as valid, as verl-agent's own default of all-ones when the info lacks it
    return True if value is None else _as_bool(value)


def _flags(column: Any) -> np.ndarray:
    """``_truthy`` of every entry; a column of plain bools (verl-agent's) converts in C."""
    values = np.asarray(column, dtype=object).tolist()
    if set(map(type, values)) <= {bool, np.bool_}:
        return np.asarray(values, dtype=bool)
    return np.asarray([_truthy(v) for v in values], dtype=bool)


def first_response_values(token_values: Any, response_mask: Any) -> np.ndarray:
    """``(bs,)`` each row's value at its first response token (0 for a row without any).

    verl's outcome estimators give every response token of a row the same advantage, so this is
    the row's advantage.
    """
    import torch

    mask = response_mask.to(torch.bool)
    first = mask.to(torch.int64).argmax(dim=1)
    vals = token_values[torch.arange(token_values.shape[0], device=token_values.device), first]
    vals = torch.where(mask.any(dim=1), vals, torch.zeros_like(vals))
    return vals.detach().to(torch.float64).cpu().numpy()
