"""A request as the real engine holds it: a sequence group plus its sampling state (paper §4.4).

The scheduler and the KV cache managers see a plain :class:`paged.core.SequenceGroup`; the engine's
groups also carry what choosing tokens needs between iterations, typed: the request's seeded
random generator (parallel sampling) or its beam-search bookkeeping (beam search).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from paged.core.sequence import SequenceGroup
from paged.engine.beam_search import BeamSearchState

__all__ = ["EngineSequenceGroup"]


@dataclass(slots=True, eq=False)
class EngineSequenceGroup(SequenceGroup):
    """A :class:`~paged.core.SequenceGroup` with the engine's sampling state.

    Attributes:
        generator: the request's ``torch.Generator`` (seeded from ``SamplingParams.seed``),
            created on its first sampled token; None for greedy requests.
        beam: beam search: the candidates' scores and the finished hypotheses; else None.
        beam_history: beam search: one dict per step: ``step``, ``seq_ids`` (candidates that ran),
            ``parents`` and ``children`` (sequence ids: who continued whom), ``blocks_in_use`` and
            ``blocks_without_sharing`` (the candidates' KV blocks with and without sharing, §4.4).
    """

    generator: torch.Generator | None = None
    beam: BeamSearchState | None = None
    beam_history: list[dict] = field(default_factory=list)
