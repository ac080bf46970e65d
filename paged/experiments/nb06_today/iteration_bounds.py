"""What bounds the iterations of a simulated run: the cost model's roofline, iteration by iteration (§6.2).

Paging pays when a larger batch turns into more requests served per second: while a decode step is
bound by reading the weights (memory bound), adding sequences to the batch costs little time; once the
linear layers' FLOPs exceed the weight reads (compute bound), or when long prompt prefills take the GPU
time, a larger batch buys little. Which of these holds is measured here on the iterations a run actually
ran, not assumed from the batch size:

* :class:`BoundRecorder`: the :class:`~paged.sim.cost_model.CostModel` of a system, unchanged in every
  time it returns, that also adds up per iteration (prefill and decode, the simulator's fast-forwarded
  decode runs included: it prices each of their iterations) its seconds, whether its linear layers are
  compute bound (their FLOP time above the time to stream the weights,
  :meth:`~paged.sim.cost_model.CostModel.linear_limits`), the context-dependent part of a decode step (the KV
  reads of attention and the block tables copied to the device) and the host (CPU) seconds;
* :func:`bound_profile`: one saturated run (every request waiting from t = 0, as the peak-throughput run
  of :func:`paged.experiments.serving.simulate_point`) of a system on a deployment through a
  :class:`BoundRecorder`: the shares of its busy time and the decode batches it reached.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from paged.experiments.serving.run_length import long_trace
from paged.sim.config import DEFAULT_BLOCK_SIZE, ServingConfig
from paged.sim.cost_model import CostModel

__all__ = ["BoundRecorder", "bound_profile"]


def _tally() -> dict:
    return {"seconds": 0.0, "prefill_seconds": 0.0, "compute_bound_seconds": 0.0, "context_seconds": 0.0,
            "host_seconds": 0.0, "decode_seconds": 0.0, "decode_seq_seconds": 0.0, "decode_iterations": 0,
            "max_decode_batch": 0}


@dataclass(frozen=True, slots=True)
class BoundRecorder(CostModel):
    """A :class:`~paged.sim.cost_model.CostModel` that returns the same times and adds up, in
    ``tally`` (a dict, seconds and counts), what bounds each iteration it prices (module docstring).

    Keys of ``tally``: ``seconds`` (all iterations), ``prefill_seconds``, ``compute_bound_seconds``
    (iterations whose linear layers are compute bound), ``context_seconds`` (decode time that grows with
    the context: KV reads and block-table copies), ``host_seconds``, ``decode_seconds``,
    ``decode_seq_seconds`` (Σ batch × seconds over decodes), ``decode_iterations``, ``max_decode_batch``.
    Swap and copy times are not tallied (they are priced by other methods). O(1) per iteration on top
    of the cost model's own cost.
    """

    tally: dict = field(default_factory=_tally, compare=False, repr=False)

    @classmethod
    def of(cls, cost: CostModel) -> "BoundRecorder":
        """A recorder with ``cost``'s model, server and factors and an empty tally."""
        return cls(**{f.name: getattr(cost, f.name) for f in fields(CostModel)})

    def _compute_bound(self, num_tokens: int, num_logits: int) -> bool:
        memory, compute = self.linear_limits(num_tokens)
        return compute > memory

    def decode_time(self, num_seqs: int, context_tokens: int) -> float:
        """:meth:`CostModel.decode_time`, tallied (seconds)."""
        t = CostModel.decode_time(self, num_seqs, context_tokens)
        tally = self.tally
        tally["seconds"] += t
        tally["decode_seconds"] += t
        tally["decode_seq_seconds"] += num_seqs * t
        tally["decode_iterations"] += 1
        if num_seqs > tally["max_decode_batch"]:
            tally["max_decode_batch"] = num_seqs
        tally["context_seconds"] += t - CostModel.decode_time(self, num_seqs, 0)
        tally["host_seconds"] += self.host_time(num_seqs, num_seqs, context_tokens / self.block_size + num_seqs)
        if self._compute_bound(num_seqs, num_seqs):
            tally["compute_bound_seconds"] += t
        return t

    def prefill_time(self, prompt_lens: list[int]) -> float:
        """:meth:`CostModel.prefill_time`, tallied (seconds)."""
        t = CostModel.prefill_time(self, prompt_lens)
        tally, n = self.tally, sum(prompt_lens)
        tally["seconds"] += t
        tally["prefill_seconds"] += t
        tally["host_seconds"] += self.host_time(len(prompt_lens), n, 0)
        if self._compute_bound(n, len(prompt_lens)):
            tally["compute_bound_seconds"] += t
        return t


def bound_profile(deployment: str, trace: str, system: str, num_requests: int, *, seed: int = 0,
                  block_size: int = DEFAULT_BLOCK_SIZE, tokenizer: str = "cl100k") -> dict:
    """What bounds ``system``'s saturated run of ``num_requests`` requests of ``trace`` on ``deployment``
    (all arriving at t = 0; the requests of the peak-throughput run, :func:`long_trace`).

    Returns:
        ``deployment``, ``trace``, ``system``, ``throughput_rps`` (req/s), the shares of the busy GPU
        time (fractions): ``prefill_share`` (prefill iterations), ``compute_bound_share`` (iterations
        whose linear layers are compute bound), ``context_share`` (KV reads and block tables of decodes),
        ``host_share`` (host CPU costs); ``decode_batch`` (time-weighted mean decode batch, sequences)
        and ``max_decode_batch`` (the largest decode batch reached).

    Raises:
        ValueError: for an unknown deployment, trace or system (:class:`~paged.sim.config.ServingConfig`).
    """
    config = ServingConfig(model=deployment, system=system, block_size=block_size)
    recorder = BoundRecorder.of(config.cost_model())
    requests = long_trace(trace, math.inf, num_requests, seed, tokenizer=tokenizer)
    result = config.replace(model=recorder).serve(requests)
    t = recorder.tally
    busy = t["seconds"] or math.nan
    return {"deployment": deployment, "trace": trace, "system": system,
            "throughput_rps": len(result.groups) / result.duration,
            "prefill_share": t["prefill_seconds"] / busy, "compute_bound_share": t["compute_bound_seconds"] / busy,
            "context_share": t["context_seconds"] / busy, "host_share": t["host_seconds"] / busy,
            "decode_batch": t["decode_seq_seconds"] / t["decode_seconds"] if t["decode_seconds"] else 0.0,
            "max_decode_batch": t["max_decode_batch"]}
