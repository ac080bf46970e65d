"""A cost model fitted to a profile of a real engine: step time linear in batch, tokens and context.

The GPU cost model of the paper's servers (:class:`paged.sim.cost_model.CostModel`) prices a decode
iteration as a part that grows with the batch (weights, sampling, per-sequence host work), a fixed
part and a part linear in the context tokens read (attention), and a prefill as a part per
sequence, per token and per squared prompt length (causal attention). :class:`LinearCostModel` has
exactly that form with free coefficients, fitted (:meth:`LinearCostModel.fit`) to measured step
times of this project's own engine on this machine (:mod:`paged.experiments.nb05_engine.validation`). With it the
simulator predicts what the engine will measure on a trace; comparing the two validates the
simulator's scheduler-and-memory half against real execution (paper §6 simulates nothing; the
simulator here stands in for the paper's GPUs).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from numbers import Real

import numpy as np

from paged.sim.iteration_cost import IterationCostModel

__all__ = ["LinearCostModel", "DECODE_TERMS", "PREFILL_TERMS"]

#: Decode features, in coefficient order: 1, sequences, context tokens.
DECODE_TERMS = ("base", "per_seq", "per_context_token")
#: Prefill features, in coefficient order: 1, sequences, tokens, Σ prompt² (tokens²).
PREFILL_TERMS = ("base", "per_seq", "per_token", "per_token_squared")


def _nonnegative_lstsq(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with coefficients ≥ 0: solve, drop the negative ones, solve again (active set)."""
    active = list(range(x.shape[1]))
    coef = np.zeros(x.shape[1])
    while active:
        sol, *_ = np.linalg.lstsq(x[:, active], y, rcond=None)
        if (sol >= 0).all():
            coef[active] = sol
            break
        active = [a for a, v in zip(active, sol) if v >= 0] if (sol >= 0).any() else []
    return coef


@dataclass(frozen=True, slots=True)
class LinearCostModel(IterationCostModel):
    """Iteration seconds linear in the batch's shape (module docstring).

    Attributes:
        decode: seconds of a decode: ``(base, per sequence, per context token)``.
        prefill: seconds of a prefill: ``(base, per sequence, per token, per squared prompt token)``.
        swap_per_block: seconds to copy one KV block one way (swap preemption); 0 if not measured.
    """

    decode: tuple[float, float, float]
    prefill: tuple[float, float, float, float]
    swap_per_block: float = 0.0

    def decode_time(self, num_seqs: int, context_tokens: int) -> float:
        """Seconds of one decode of ``num_seqs`` sequences over ``context_tokens`` context tokens
        (linear in the context, as the simulator's fast-forward needs)."""
        a, b, c = self.decode
        return a + b * num_seqs + c * context_tokens

    def decode_time_of(self, num_seqs: int) -> Callable[[int], float]:
        """:meth:`decode_time` of ``num_seqs`` sequences as a function of the context tokens alone (the
        same seconds: ``a + b·n`` computed once, then plus ``c·context``; a subclass that overrides
        :meth:`decode_time` gets its own, bound to ``num_seqs``)."""
        if type(self).decode_time is not LinearCostModel.decode_time:
            return partial(self.decode_time, num_seqs)
        a, b, c = self.decode
        fixed = a + b * num_seqs
        return lambda context_tokens: fixed + c * context_tokens

    def prefill_time(self, prompt_lens: list[int]) -> float:
        """Seconds of one prefill over prompts of ``prompt_lens`` tokens."""
        a, b, c, d = self.prefill
        return a + b * len(prompt_lens) + c * sum(prompt_lens) + d * sum(p * p for p in prompt_lens)

    def swap_time(self, num_blocks: int) -> float:
        """Seconds to copy ``num_blocks`` KV blocks one way."""
        return self.swap_per_block * max(num_blocks, 0)

    @classmethod
    def fit(cls, steps, swap_per_block: float = 0.0) -> LinearCostModel:
        """Fit both parts to profiled steps, minimising the relative error, coefficients ≥ 0.

        Args:
            steps: rows (a DataFrame or dicts) with ``is_prefill`` (bool), ``num_seqs``,
                ``num_tokens`` (tokens computed), ``context_tokens`` (decode: total context),
                ``sum_sq_tokens`` (prefill: Σ prompt², tokens²) and ``seconds``.
            swap_per_block: measured seconds per block copy, kept as given.

        Raises:
            ValueError: if there are no prefill or no decode steps, or a time is not positive.
        """
        import pandas as pd

        df = pd.DataFrame(steps)
        if len(df) == 0 or not (df["seconds"] > 0).all():
            raise ValueError("need profiled steps with positive seconds")
        prefill, decode = df[df["is_prefill"].astype(bool)], df[~df["is_prefill"].astype(bool)]
        if len(prefill) == 0 or len(decode) == 0:
            raise ValueError(f"need both prefill and decode steps, got {len(prefill)} and {len(decode)}")

        def solve(features, seconds):
            w = 1.0 / seconds.to_numpy()  # relative error: every step counts alike
            return tuple(float(v) for v in _nonnegative_lstsq(features * w[:, None], np.ones(len(w))))

        xd = np.column_stack([np.ones(len(decode)), decode["num_seqs"], decode["context_tokens"]]).astype(float)
        xp = np.column_stack([np.ones(len(prefill)), prefill["num_seqs"], prefill["num_tokens"],
                              prefill["sum_sq_tokens"]]).astype(float)
        return cls(solve(xd, decode["seconds"]), solve(xp, prefill["seconds"]), float(swap_per_block))

    def scaled(self, factor: float) -> LinearCostModel:
        """The same model with every coefficient (swap included) × ``factor``: a machine that ran
        ``factor`` times slower than when profiled.

        Raises:
            ValueError: if ``factor`` is not a positive finite number.
        """
        if isinstance(factor, bool) or not isinstance(factor, Real) or not 0 < factor < math.inf:
            raise ValueError(f"factor must be a positive finite number, got {factor!r}")
        f = float(factor)
        scaled = LinearCostModel(tuple(f * v for v in self.decode), tuple(f * v for v in self.prefill),
                                 f * self.swap_per_block)
        if not all(map(math.isfinite, (*scaled.decode, *scaled.prefill, scaled.swap_per_block))):
            raise ValueError(f"factor {factor!r} makes a coefficient infinite")
        return scaled

    def relative_errors(self, steps) -> np.ndarray:
        """(predicted − measured) ÷ measured of every profiled step (same columns as :meth:`fit`)."""
        import pandas as pd

        df = pd.DataFrame(steps)
        pred = [self.prefill_time_from(r) if r["is_prefill"] else self.decode_time(r["num_seqs"], r["context_tokens"])
                for _, r in df.iterrows()]
        return np.asarray(pred) / df["seconds"].to_numpy() - 1.0

    def prefill_time_from(self, row) -> float:
        """Prefill seconds from a profile row's sums (``num_seqs``, ``num_tokens``, ``sum_sq_tokens``)."""
        a, b, c, d = self.prefill
        return a + b * row["num_seqs"] + c * row["num_tokens"] + d * row["sum_sq_tokens"]
