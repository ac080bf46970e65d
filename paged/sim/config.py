"""One simulated run's settings, checked once, building the cost model, the KV cache manager and the scheduler (§6.1).

A run is a model on a server (a Table 1 preset such as ``opt-13b``, or a model of today on ``tp`` GPUs),
one of the paper's systems, the KV block size, the preemption mode, the host-cost scale and the batch
budgets, plus the workload it serves (a trace name, a seed, ``n`` parallel samples or a beam width).
:class:`ServingConfig` holds all of them, so the block size enters once and is the same for the cost
model (the paged kernel's cost, the KV capacity in whole blocks) and the manager; the capacity travels
in blocks from the server's KV bytes to the allocator (:meth:`ServingConfig.num_gpu_blocks`).

>>> config = ServingConfig(model="opt-13b", system="paged", block_size=16)
>>> result = config.serve(requests)      # doctest: +SKIP  (a paged.workloads.Trace)
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from functools import lru_cache

from paged.block.allocator import DEFAULT_BLOCK_SIZE  # noqa: F401 - also this module's public name
from paged.core.scheduler import PREEMPTION_MODES
from paged.core.serving_loop import ServingResult
from paged.sim import fast
from paged.sim.cost_model import CostModel, get_cost_model
from paged.sim.simulator import simulate
from paged.sim.static_batching import simulate_static_batching
from paged.systems import PAPER_SYSTEMS, get_system

__all__ = ["ServingConfig", "CPU_SWAP_BYTES_PER_GPU", "DEFAULT_BLOCK_SIZE", "model_name"]

#: CPU swap space of the paged system per GPU (bytes): vLLM's default ``swap_space=4`` GiB.
CPU_SWAP_BYTES_PER_GPU = 4 * 2**30


@dataclass(frozen=True, slots=True)
class ServingConfig:
    """The settings of one simulated run (module docstring); immutable, checked when made.

    Attributes:
        model: a Table 1 preset (``opt-13b``, ``opt-66b``, ``opt-175b``, ``llama-13b``), a deployment
            ``name@NxGPU[:max_len]`` (:func:`paged.sim.deployment.get_deployment`), or a ready
            :class:`~paged.sim.cost_model.CostModel` (whose block size must be :attr:`block_size`).
        system: one of the paper's systems (:data:`paged.systems.PAPER_SYSTEMS`).
        block_size: KV block size (tokens): the paged manager's blocks and the paged kernel's cost.
        preemption: ``"recompute"`` or ``"swap"`` (§4.5).
        cpu_scale: factor on the cost model's host costs (0 for FasterTransformer, whatever is asked).
        prefix_caching: paged only: automatic prefix caching finds shared prefixes by their tokens;
            otherwise the paged system shares a trace's prefixes as a provider-reserved prefix (§4.4).
        max_num_seqs: most sequences running at once (vLLM's 256).
        max_num_batched_tokens: most tokens in one prefill (tokens); None: ``max(2560, max_seq_len)``,
            vLLM 0.1's default budget (2,560) or a whole prompt of the model's maximum length.
        trace, seed, tokenizer: the workload (:func:`paged.workloads.get_trace`).
        n, beam_width: every request runs ``n`` parallel samples or a beam search of that width (§4.4).

    Raises:
        ValueError: naming the setting, for an unknown system or preemption mode, a block size that is
            not an integer ≥ 1, a ``cpu_scale`` that is not a finite number ≥ 0, ``n``/``beam_width`` below
            1 or both above 1, sequence groups or prefix caching on FasterTransformer, prefix caching on
            an Orca system, or a cost model whose block size differs.
    """

    model: str | CostModel = "opt-13b"
    system: str = "paged"
    block_size: int = DEFAULT_BLOCK_SIZE
    preemption: str = "recompute"
    cpu_scale: float = 1.0
    prefix_caching: bool = False
    max_num_seqs: int = 256
    max_num_batched_tokens: int | None = None
    trace: str = "sharegpt"
    seed: int = 0
    tokenizer: str = "gpt2"
    n: int = 1
    beam_width: int = 1

    def __post_init__(self) -> None:
        if self.system not in PAPER_SYSTEMS:
            raise ValueError(f"unknown system {self.system!r} for the simulator; choose one of {PAPER_SYSTEMS}")
        if isinstance(self.block_size, bool) or not isinstance(self.block_size, numbers.Integral) \
                or self.block_size < 1:
            raise ValueError(f"block_size must be an integer ≥ 1 (tokens), got {self.block_size!r}")
        if self.preemption not in PREEMPTION_MODES:
            raise ValueError(f"preemption must be one of {PREEMPTION_MODES}, got {self.preemption!r}")
        if isinstance(self.cpu_scale, bool) or not isinstance(self.cpu_scale, numbers.Real) \
                or not 0 <= self.cpu_scale < float("inf"):
            raise ValueError(f"cpu_scale must be a finite number ≥ 0, got {self.cpu_scale!r}")
        for name in ("n", "beam_width", "max_num_seqs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(f"{name} must be an integer ≥ 1, got {value!r}")
        if self.n > 1 and self.beam_width > 1:
            raise ValueError(f"n and beam_width cannot both be above 1, got n={self.n}, beam_width={self.beam_width}")
        if not isinstance(self.prefix_caching, bool):
            raise ValueError(f"prefix_caching must be True or False, got {self.prefix_caching!r}")
        spec = get_system(self.system)
        if not spec.has_kv_cache_manager and (self.n > 1 or self.beam_width > 1 or self.prefix_caching):
            raise ValueError(f"{self.system!r} batches whole single-sequence requests: no parallel sampling, beam "
                             "search or prefix caching")
        if self.prefix_caching and spec.kv_cache != "paged":
            raise ValueError(f"{self.system!r} keeps one contiguous reservation per sequence: it cannot share "
                             "blocks, so it has no prefix caching")
        if isinstance(self.model, CostModel) and self.model.block_size != self.block_size:
            raise ValueError(f"the cost model's block size ({self.model.block_size}) differs from block_size="
                             f"{self.block_size}")

    def replace(self, **changes) -> ServingConfig:
        """A copy with ``changes`` (checked again)."""
        return ServingConfig(**{**self.settings(), **changes})

    def settings(self) -> dict:
        """The fields as a dict (``model`` as given: a name or a cost model)."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    # -- what the settings build ----------------------------------------------------------
    def cost_model(self) -> CostModel:
        """The cost model of the model's server as the system runs it: the paged kernel at
        :attr:`block_size` for a system with one, else a contiguous kernel; host costs × ``cpu_scale``,
        none for a request-level (FasterTransformer) system. Built once per distinct config (a cost
        model given as :attr:`model` is returned as is)."""
        return self.model if isinstance(self.model, CostModel) else _cost_model(self)

    @property
    def max_seq_len(self) -> int:
        """The model's maximum sequence length (tokens)."""
        return self.cost_model().model.max_seq_len

    def num_gpu_blocks(self) -> int:
        """KV blocks of :attr:`block_size` tokens the server's KV cache memory holds (blocks)."""
        return self.cost_model().num_kv_blocks

    def num_cpu_blocks(self) -> int:
        """Blocks of CPU swap space of the paged system: :data:`CPU_SWAP_BYTES_PER_GPU` per GPU (blocks)."""
        cost = self.cost_model()
        return CPU_SWAP_BYTES_PER_GPU * cost.server.num_gpus // (cost.model.kv_bytes_per_token * self.block_size)

    def kv_manager(self):
        """A fresh KV cache manager of the system over :meth:`num_gpu_blocks` blocks (the fast one when the
        simulator's fast path is on, :func:`paged.sim.fast.make_kv_manager`).

        Raises:
            ValueError: for FasterTransformer, which has no KV cache manager (it batches whole requests).
        """
        return fast.make_kv_manager(self.system, self.num_gpu_blocks(), self.block_size, max_seq_len=self.max_seq_len,
                                    num_cpu_blocks=self.num_cpu_blocks(), enable_prefix_caching=self.prefix_caching)

    def scheduler_settings(self) -> dict:
        """The scheduler's budgets and preemption mode, as :func:`paged.sim.simulator.simulate` takes them."""
        budget = self.max_num_batched_tokens
        return dict(max_num_seqs=self.max_num_seqs, preemption_mode=self.preemption,
                    max_num_batched_tokens=max(2560, self.max_seq_len) if budget is None else budget)

    def serve(self, requests, *, on_finish=None, record_sharing: bool = False) -> ServingResult:
        """Serve ``requests`` (with ``prompt_len``, ``output_len``, ``arrival_time`` and optionally
        ``prefix_len``) with this system; FasterTransformer batches whole requests
        (:func:`paged.sim.static_batching.simulate_static_batching`) and ignores ``on_finish``.

        Args:
            on_finish: as :func:`paged.sim.simulator.simulate`.
            record_sharing: record the KV blocks held with and without sharing (``result.sharing``).

        Raises:
            RequestTooLargeError: as :func:`paged.sim.simulator.simulate`.
        """
        cost = self.cost_model()
        if not get_system(self.system).has_kv_cache_manager:
            return simulate_static_batching(requests, cost, cost.num_kv_slots // self.max_seq_len)
        return simulate(requests, self.kv_manager(), cost, record_memory=False, on_finish=on_finish, n=self.n,
                        max_seq_len=self.max_seq_len,
                        beam_width=self.beam_width, shared_prefix="tokens" if self.prefix_caching else "reserved",
                        record_sharing=record_sharing, **self.scheduler_settings())

    def as_row(self) -> dict:
        """The settings as a result row's columns (``model`` by name)."""
        return {**self.settings(), "model": self.cost_model().model.name}


@lru_cache(maxsize=64)
def _cost_model(config: ServingConfig) -> CostModel:
    spec = get_system(config.system)
    return get_cost_model(config.model, block_size=config.block_size, paged_kernel=spec.paged_kernel,
                          cpu_scale=0.0 if spec.batching == "request" else config.cpu_scale)


def model_name(model: str | CostModel) -> str:
    """The model's name as result rows carry it (``opt-13b``, a deployment's full name), for a preset, a
    deployment name or a cost model.

    Raises:
        ValueError: for an unknown model (as :func:`paged.sim.cost_model.get_cost_model`).
    """
    return model.model.name if isinstance(model, CostModel) else ServingConfig(model=model).cost_model().model.name
