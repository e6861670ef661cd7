"""The credit layer: reference graph, step annotations, base estimators and ProAS shaping.

Pure functions over arrays plus the graph; imports nothing from envs, policies or the trainer,
so a verl user can take it alone. Symbols of the paper and where they live:

==================  ======================================================
``Rea_t``           ``annotate(...).rea`` / ``CreditResult.rea``
``PA_t``            ``annotate(...).pa`` / ``CreditResult.pa``
``D_{i,t}``         ``future_drift`` / ``CreditResult.fd``
``A_i``             ``BaseAdvantage.traj`` / ``CreditResult.traj_advantage``
``B_{i,t}``         ``BaseAdvantage.step`` / ``CreditResult.step_advantage``
``U``, ``T_i``      ``BaseAdvantage.uniform`` / ``CreditResult.uniform``
``Ã_{i,t}``         ``shape`` (MUI: ``mask_unreasonable``, APR: ``redistribute_penalty``)
==================  ======================================================

``read_trajectories(path)`` reads a trajectory log (one JSON trajectory a line, checked as
``proas credit`` checks it); ``compute_credit`` and ``ReferenceGraph.from_trajectories`` also take
the parsed JSON records themselves.

Estimators and shapings are looked up by name in ``ESTIMATORS`` and ``SHAPINGS``
(``proas.credit.registry``), each entry with its typed options.
"""

from proas.credit.annotate import REA_RULES, Annotations, annotate, annotate_loop, future_drift, reasonable
from proas.credit.batch import CreditBatch
from proas.credit.cli import read_trajectories
from proas.credit.estimators import (
    GROUP_STATS,
    BaseAdvantage,
    dynamic_sampling_keep,
    get_estimator,
)
from proas.credit.graph import GraphFileError, ReferenceGraph, clean_path
from proas.credit.pipeline import (
    ARG_VARIANTS,
    CreditResult,
    InvalidActionPenalty,
    compute_credit,
    credit_arrays,
    make_reference_graph,
)
from proas.credit.registry import (
    ESTIMATORS,
    SHAPINGS,
    EstimatorSpec,
    Option,
    ShapingSpec,
    estimator_spec,
    register_estimator,
    register_shaping,
    shaping_spec,
)
from proas.credit.shaping import (
    mask_unreasonable,
    progress_bonus,
    redistribute_penalty,
    shape,
)

__all__ = [
    "ARG_VARIANTS",
    "ESTIMATORS",
    "GROUP_STATS",
    "REA_RULES",
    "SHAPINGS",
    "Annotations",
    "BaseAdvantage",
    "EstimatorSpec",
    "Option",
    "ShapingSpec",
    "CreditBatch",
    "CreditResult",
    "GraphFileError",
    "InvalidActionPenalty",
    "ReferenceGraph",
    "annotate",
    "annotate_loop",
    "reasonable",
    "clean_path",
    "compute_credit",
    "credit_arrays",
    "dynamic_sampling_keep",
    "estimator_spec",
    "future_drift",
    "get_estimator",
    "make_reference_graph",
    "mask_unreasonable",
    "progress_bonus",
    "read_trajectories",
    "redistribute_penalty",
    "register_estimator",
    "register_shaping",
    "shape",
    "shaping_spec",
]
