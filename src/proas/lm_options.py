"""The values the ``lm`` policy's enumerated options take, in one torch-free place.

``proas.policies.lm`` checks them when a policy is built and ``proas.train.config`` when a
config is validated; the config module must not import the lm module (it pulls in torch and
transformers), so both read them from here.
"""

from __future__ import annotations

__all__ = ["DECODERS", "MODES", "SCORE_IMPLS"]

#: ``generate``: write a response and parse the action from it; ``score``: choose among the
#: candidate actions by their likelihood (see ``proas.policies.lm``)
MODES = ("generate", "score")

#: generate mode's decoding: ``hf`` (``model.generate``) or ``static`` (preallocated KV cache and,
#: on CUDA, a CUDA graph per batch bucket: ``proas.policies.lm_decode``)
DECODERS = ("hf", "static")

#: score mode's forward passes (``LMPolicy.candidate_logps``): ``expand`` (encode the prompt,
#: copy its KV cache once per candidate, score the candidates on the copies), ``packed`` (one
#: sequence per decision, the prompt then every candidate, with a mask that keeps them apart) or
#: ``auto`` (``packed`` for the loss's passes everywhere and for acting on a CPU, ``expand`` for
#: acting on a GPU: the faster of the two for each, as measured; ``LMPolicy.score_impl_for``)
SCORE_IMPLS = ("expand", "packed", "auto")
