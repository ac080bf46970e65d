"""A GPU cost model: how long one serving iteration takes on the paper's servers (§6.1, Table 1).

Only *time* is modelled; memory behaviour always comes from the real KV cache managers. One
iteration is either a prefill (every prompt token of the admitted requests) or a decode (one
token for each running sequence). Its time, on a server of ``g`` GPUs running the model with
tensor parallelism (each GPU holds ``1/g`` of every weight matrix and of the KV heads):

* **linear layers** (roofline): ``max(weight bytes / g / HBM bandwidth,
  2 · parameters · tokens / g / peak FLOP/s)``, each peak times a stated efficiency;
* **attention**: decode reads the KV of every context token (memory bound,
  ``context tokens · KV bytes per token / g / HBM bandwidth``), scaled for the paged kernel by
  the paper's measured kernel overhead and a per-block overhead that grows as blocks shrink;
  prefill computes causal attention (``2 · layers · hidden · n²`` FLOPs per ``n``-token prompt);
* **tensor-parallel communication**: two ring all-reduces of the activations per layer over
  NVLink (none on one GPU);
* **GPU-side fixed costs** per iteration: kernel launches per layer (no CUDA graphs in 2023);
* **host (CPU) costs** per iteration, serial with the GPU work as in the 2023 vLLM (no overlap of
  scheduling with the forward): a fixed per-iteration cost, per running sequence the scheduler's
  work, input preparation and sampling with output processing, and the host→device copies of the
  step's inputs (token ids, positions, slot mapping, block tables). All of them scale together with
  ``cpu_scale`` (0: none, 1: the sourced values, 2: twice them) for the sensitivity study;
  FasterTransformer's C++ loop with sampling on the GPU has none of them (``cpu_scale=0``, set by
  :meth:`paged.sim.config.ServingConfig.cost_model`);
* **swapping** (§4.5): one PCIe copy per block per layer for K and for V, each with a fixed
  issue latency, so small blocks swap slowly (§7.3, Fig. 19a);
* **recomputation** is simply the prefill of prompt + generated tokens;
* **KV copies inside device memory** (§4.4): each copied byte is read and written once at the
  achieved HBM bandwidth, on every GPU for its share of the KV heads. Paged pays one block per
  copy-on-write (``block_copy_time``: a block shared by forked beams or samples that one of them
  writes into); a contiguous system (Orca) pays a copy of the parent's whole KV each time a beam
  forks into another reservation (``kv_copy_time``, charged by the simulated executor).

Every constant below cites its source; the efficiency factors' central values were chosen before
any comparison, their low and high ends come from published A100 measurements
(:data:`EFFICIENCY_RANGES`, for the sensitivity study), and nothing is fitted to the paper's curves. The host costs come from the vLLM
team's published profiles of later (2024) vLLM versions on other GPUs; the 2023 code the paper
measured was at least as slow on the host (its sampler ran one request at a time, vLLM issue #249),
so the sourced values are a low estimate and the 2× band is the plausible range. Not modelled
(no published number): per-prompt-token Python work of a prefill's input preparation.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from paged.sim.deployment import get_deployment
from paged.sim.iteration_cost import IterationCostModel
from paged.sim.model_spec import GiB, ModelSpec, get_model, kv_cache_slots

__all__ = ["ServerSpec", "CostModel", "SERVERS", "PRESETS", "get_cost_model", "A100_PEAK_FP16_FLOPS",
           "A100_40GB_HBM_BYTES_PER_S", "A100_80GB_HBM_BYTES_PER_S", "NVLINK_BYTES_PER_S",
           "PCIE4_X16_BYTES_PER_S", "HOST_COSTS", "EFFICIENCY_RANGES", "MEMORY_EFFICIENCY", "COMPUTE_EFFICIENCY",
           "MEMORY_EFFICIENCY_RANGE", "COMPUTE_EFFICIENCY_RANGE"]

#: A100 dense FP16/BF16 Tensor Core peak, FLOP/s per GPU. Source: NVIDIA A100 Tensor Core GPU
#: datasheet (2020/2021), "FP16 Tensor Core 312 TFLOPS" (624 with sparsity, not used here).
A100_PEAK_FP16_FLOPS = 312e12
#: HBM2 bandwidth of the A100-40GB (SXM), bytes/s. Source: A100 datasheet, "1,555 GB/s".
A100_40GB_HBM_BYTES_PER_S = 1555e9
#: HBM2e bandwidth of the A100-80GB (SXM), bytes/s. Source: A100 datasheet, "2,039 GB/s".
A100_80GB_HBM_BYTES_PER_S = 2039e9
#: NVLink 3 bandwidth per GPU and direction, bytes/s. Source: A100 datasheet, "NVLink 600 GB/s"
#: is the bidirectional total of 12 links × 25 GB/s per direction; one direction is 300 GB/s.
NVLINK_BYTES_PER_S = 300e9
#: PCIe 4.0 x16 host↔device bandwidth, bytes/s, effective. Source: PCIe 4.0 x16 is 31.5 GB/s
#: raw per direction (PCI-SIG, 16 GT/s × 16 lanes, 128b/130b); pinned-memory cudaMemcpy
#: reaches about 25 GB/s in practice (CUDA bandwidthTest on A100 systems), which we use.
PCIE4_X16_BYTES_PER_S = 25e9

#: Fraction of peak HBM bandwidth a decode step's streaming reads (weights, KV) achieve; central
#: value, inside the sourced range :data:`MEMORY_EFFICIENCY_RANGE`. Chosen before any comparison.
MEMORY_EFFICIENCY = 0.8
#: Sourced ends of the achieved HBM bandwidth fraction, for the sensitivity study (never fitted):
#: low 0.70: FasterTransformer's own GPT-20B benchmark on one A100-80GB (NVIDIA/FasterTransformer
#: docs/gpt_guide.md, "Performance of GPT-20B", 44 layers, hidden 6144, fp16, batch 1): input 80 /
#: output 200 tokens take 5,609 ms and input 60 / output 20 take 560 ms, so a decode step costs
#: (5609 − 560) / 180 ≈ 28.0 ms; its ≈ 20.2e9 parameters are 40.4 GB, read at 40.4 GB / 28.0 ms ≈
#: 1.44 TB/s = 0.71 of 2,039 GB/s. That step also holds attention, launches and sampling, so the
#: weights alone stream at least this fast. High 0.90: a bound, not a cited A100 measurement (no
#: published A100 streaming-bandwidth figure was found for this module): DRAM refresh and page
#: misses keep any kernel below the datasheet figure, and 0.9 leaves ~10 %; a kernel benchmark's
#: note that vLLM's paged-attention decode reaches "~70-85% of peak HBM bandwidth" on H100
#: (KernelBench-hard, problem 03_paged_attention) falls inside the range.
MEMORY_EFFICIENCY_RANGE = (0.70, 0.90)
#: Fraction of peak Tensor Core FLOP/s the GEMMs of a large batch achieve; central value, inside
#: :data:`COMPUTE_EFFICIENCY_RANGE` (serving batches give skinny GEMMs: M = batch tokens). Chosen
#: before any comparison.
COMPUTE_EFFICIENCY = 0.6
#: Sourced ends of the achieved Tensor Core fraction, for the sensitivity study (never fitted):
#: low 0.52: Megatron-LM on A100 (Narayanan et al., SC'21, "Efficient Large-Scale Language Model
#: Training on GPU Clusters Using Megatron-LM": 163 TFLOP/s per GPU, 52 % of peak, end to end for
#: its 1T-parameter model; the GEMMs alone run faster, so a GEMM-bound batch does at least this);
#: high 0.80: large fp16 GEMMs under cuBLAS 11 on A100 (NVIDIA's "Matrix Multiplication Background
#: User's Guide", Feb. 2023, §2.3 and Fig. 2: large, tile-aligned GEMMs approach ≈ 80 % of 312 TFLOP/s,
#: read off its figures, not a number it quotes; serving shapes with a few hundred rows stay below).
COMPUTE_EFFICIENCY_RANGE = (0.52, 0.80)
#: Fraction of NVLink bandwidth a ring all-reduce achieves (NCCL "bus bandwidth"). Assumption:
#: nccl-tests on DGX A100 report about 230–240 GB/s of 300; we take 0.8.
NVLINK_EFFICIENCY = 0.8
#: Latency of one all-reduce of a small message inside one NVLink node (seconds). Assumption:
#: order of 10 µs for NCCL on NVLink/NVSwitch.
ALLREDUCE_LATENCY_S = 10e-6
#: Fixed per-iteration overhead (seconds): scheduling, preparing inputs, sampling, Python — the part
#: that does not grow with the batch (the per-sequence parts follow). Assumption, for a 2023
#: vLLM-like Python server without CUDA graphs. A host cost: scaled by ``cpu_scale``.
ITERATION_OVERHEAD_S = 1e-3
#: Scheduler work per running sequence per iteration (seconds). Source: vLLM PR #4280 / #4261
#: (April 2024, "[Core] Scheduling optimization"): "the original scheduler logic takes about 2ms"
#: per iteration on an A10 host in the throughput benchmark, whose batch runs at vLLM's
#: ``max_num_seqs`` = 256 sequences: 2 ms / 256 ≈ 8 µs per sequence.
SCHEDULER_PER_SEQ_S = 8e-6
#: Input preparation per sequence per iteration (seconds): Python lists of token ids, positions,
#: slot mappings and block tables. Source: vLLM RFC #6854 (July 2024, "Multi-Step Scheduling"):
#: the host work of a decode step (sampled-token transfer, pythonizing outputs, input preparation,
#: the scheduler) leaves the GPU idle "5-13ms" per step; its low end minus the scheduler's 2 ms
#: (above), at 256 sequences, is 3 ms / 256 ≈ 12 µs per sequence. The RFC does not split it; we
#: give half to input preparation and half to sampling (below) — the split is unknown, the sum is
#: what the simulation uses.
PREPARE_INPUTS_PER_SEQ_S = 6e-6
#: Sampling and output processing per sequence per iteration (seconds): the other half of the
#: RFC #6854 estimate above (vLLM's sampler and the pythonization of its outputs).
SAMPLING_PER_SEQ_S = 6e-6
#: Host→device copies of a step's inputs per iteration: token ids, positions, slot mapping, block
#: tables, context lengths (vLLM v0's ``_prepare_inputs`` builds each as one tensor), each an
#: issue latency (:data:`SWAP_COPY_LATENCY_S`) plus its bytes at the PCIe bandwidth.
INPUT_COPIES = 5
#: Bytes per token of a step's inputs: int64 token id, position and slot (3 × 8 B).
INPUT_BYTES_PER_TOKEN = 24
#: Bytes per block-table entry and per context length (int32).
INT32_BYTES = 4
#: Kernel-launch overhead per transformer layer per iteration (seconds). Assumption: about ten
#: kernels per layer at roughly 4 µs each (typical CUDA launch latency without CUDA graphs).
LAYER_LAUNCH_OVERHEAD_S = 40e-6
#: Extra latency of the paged attention kernel over a contiguous one at block size 16. Source:
#: the paper's own kernel measurement, §7.1 / Fig. 18a ("20–26% higher"); we take the low end.
PAGED_KERNEL_OVERHEAD = 1.2
#: Per-block overhead of the paged kernel, in token rows of equivalent memory traffic. Assumption:
#: each block costs one dependent block-table load plus a partly used memory transaction, about
#: one extra token row; it makes blocks below ~8 tokens slow (Fig. 18b's small-block side).
PAGED_BLOCK_OVERHEAD_TOKENS = 1.0
#: Issue latency of one host↔device cudaMemcpyAsync (seconds). Assumption: a few µs per copy;
#: vLLM v0 issues one copy per block, per layer, for K and for V, so small blocks swap slowly.
SWAP_COPY_LATENCY_S = 5e-6


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """A GPU server (Table 1).

    Attributes:
        name: e.g. ``"1xA100-40GB"``.
        num_gpus: GPUs, all used for tensor parallelism (count).
        peak_flops: dense fp16 FLOP/s per GPU.
        hbm_bytes_per_s: HBM bandwidth per GPU (bytes/s).
        nvlink_bytes_per_s: GPU↔GPU bandwidth per GPU and direction (bytes/s).
        pcie_bytes_per_s: effective host↔device bandwidth per GPU (bytes/s).
        kv_cache_bytes: KV cache memory of the whole server for the model it serves (bytes).
    """

    name: str
    num_gpus: int
    peak_flops: float
    hbm_bytes_per_s: float
    nvlink_bytes_per_s: float
    pcie_bytes_per_s: float
    kv_cache_bytes: int


def _a100(num_gpus: int, hbm: float, kv_gib: float) -> ServerSpec:
    size = "80GB" if hbm == A100_80GB_HBM_BYTES_PER_S else "40GB"
    return ServerSpec(f"{num_gpus}xA100-{size}", num_gpus, A100_PEAK_FP16_FLOPS, hbm, NVLINK_BYTES_PER_S,
                      PCIE4_X16_BYTES_PER_S, int(kv_gib * GiB))


#: Table 1's servers, keyed by the model they serve. KV cache memory is Table 1's (12, 21 and
#: 264 GB, read as GiB: 12 GiB / 800 KiB = 15.7K slots as in Table 1). LLaMA-13B's server is not
#: stated; it has OPT-13B's size and KV bytes per token, so it gets the same 1×A100-40GB, 12 GiB.
SERVERS: dict[str, ServerSpec] = {
    "opt-13b": _a100(1, A100_40GB_HBM_BYTES_PER_S, 12),
    "opt-66b": _a100(4, A100_40GB_HBM_BYTES_PER_S, 21),
    "opt-175b": _a100(8, A100_80GB_HBM_BYTES_PER_S, 264),
    "llama-13b": _a100(1, A100_40GB_HBM_BYTES_PER_S, 12),
}
PRESETS = tuple(SERVERS)


@dataclass(frozen=True, slots=True)
class CostModel(IterationCostModel):
    """Per-iteration time of ``model`` on ``server`` (module docstring), in seconds.

    Call it with a :class:`~paged.core.scheduler.SchedulerOutputs` to get that iteration's time
    (this is the ``iteration_time`` callable of :func:`paged.sim.simulator.simulate`).

    Args:
        model: the model's shape.
        server: the server.
        block_size: KV block size of a paged system (tokens); sets the paged kernel's cost.
        paged_kernel: True for the paged attention kernel (vLLM), False for a contiguous one
            (Orca, FasterTransformer).
        cpu_scale: factor on every host (CPU) cost (module docstring): 0 removes them, 1 is the
            sourced values, 2 doubles them (the sensitivity band).
        memory_efficiency: achieved fraction of HBM bandwidth (default :data:`MEMORY_EFFICIENCY`;
            the sourced ends are :data:`MEMORY_EFFICIENCY_RANGE`).
        compute_efficiency: achieved fraction of peak Tensor Core FLOP/s (default
            :data:`COMPUTE_EFFICIENCY`; sourced ends :data:`COMPUTE_EFFICIENCY_RANGE`).
    """

    model: ModelSpec
    server: ServerSpec
    block_size: int
    paged_kernel: bool = True
    cpu_scale: float = 1.0
    memory_efficiency: float = MEMORY_EFFICIENCY
    compute_efficiency: float = COMPUTE_EFFICIENCY

    # -- derived constants ------------------------------------------------------------
    @property
    def num_kv_slots(self) -> int:
        """KV token slots the server holds, whole blocks (tokens)."""
        return kv_cache_slots(self.model, self.server.kv_cache_bytes, self.block_size)

    @property
    def num_kv_blocks(self) -> int:
        """KV blocks of ``block_size`` tokens the server holds (blocks)."""
        return self.num_kv_slots // self.block_size

    @property
    def _bw(self) -> float:
        return self.server.hbm_bytes_per_s * self.memory_efficiency

    def linear_time(self, num_tokens: int, num_logits: int) -> float:
        """Roofline time of every weight matrix for ``num_tokens`` tokens (seconds)."""
        m, g = self.model, self.server.num_gpus
        embed = m.embedding_params
        flops = 2 * m.matmul_params * num_tokens + 2 * embed * num_logits
        compute = flops / g / (self.server.peak_flops * self.compute_efficiency)
        memory = m.streamed_weight_bytes / g / self._bw
        return compute if compute > memory else memory

    def _fixed_time(self, num_tokens: int) -> float:
        """GPU-side fixed costs: kernel launches and tensor-parallel all-reduces (seconds)."""
        m, g = self.model, self.server.num_gpus
        t = m.num_layers * LAYER_LAUNCH_OVERHEAD_S
        if g > 1:
            per_allreduce = (2 * (g - 1) / g * num_tokens * m.hidden_size * m.dtype_bytes
                             / (self.server.nvlink_bytes_per_s * NVLINK_EFFICIENCY) + ALLREDUCE_LATENCY_S)
            t += 2 * m.num_layers * per_allreduce
        return t

    def host_time(self, num_seqs: int, num_tokens: int, num_table_entries: int) -> float:
        """Host (CPU) seconds of one iteration (module docstring), times ``cpu_scale``.

        Args:
            num_seqs: sequences in the batch.
            num_tokens: tokens the iteration computes (prompt tokens, or one per sequence).
            num_table_entries: block-table entries copied to the device (decode; 0 for a prefill).
        """
        if not self.cpu_scale:
            return 0.0
        per_seq = SCHEDULER_PER_SEQ_S + PREPARE_INPUTS_PER_SEQ_S + SAMPLING_PER_SEQ_S
        copy_bytes = num_tokens * INPUT_BYTES_PER_TOKEN + (num_table_entries + num_seqs) * INT32_BYTES
        copies = INPUT_COPIES * SWAP_COPY_LATENCY_S + copy_bytes / self.server.pcie_bytes_per_s
        return self.cpu_scale * (ITERATION_OVERHEAD_S + num_seqs * per_seq + copies)

    @property
    def attention_slowdown(self) -> float:
        """Paged-kernel attention time ÷ contiguous-kernel attention time (≥ 0.9)."""
        if not self.paged_kernel:
            return 1.0
        c = PAGED_BLOCK_OVERHEAD_TOKENS
        return PAGED_KERNEL_OVERHEAD * (1 + c / self.block_size) / (1 + c / 16)

    # -- iterations -------------------------------------------------------------------
    def decode_time(self, num_seqs: int, context_tokens: int) -> float:
        """Seconds for one decode iteration of ``num_seqs`` sequences whose contexts total
        ``context_tokens`` tokens (each sequence reads its whole KV cache once).

        Linear in ``context_tokens`` for a fixed ``num_seqs``, which lets the simulator sum a
        run of decode iterations exactly. The block tables copied to the device hold about
        ``context_tokens / block_size + num_seqs`` entries (each sequence's last block partly full).
        """
        m, g = self.model, self.server.num_gpus
        kv_read = context_tokens * m.kv_bytes_per_token / g / self._bw * self.attention_slowdown
        entries = context_tokens / self.block_size + num_seqs
        return (self.linear_time(num_seqs, num_seqs) + self._fixed_time(num_seqs) + kv_read
                + self.host_time(num_seqs, num_seqs, entries))

    def decode_time_of(self, num_seqs: int) -> Callable[[int], float]:
        """:meth:`decode_time` of ``num_seqs`` sequences as a function of the context tokens alone: the
        terms that do not depend on the context computed once, the others with the same operations in the
        same order, so it returns exactly the same seconds (for loops that run many decode iterations of
        one batch, the simulator's calendars). A subclass that overrides :meth:`decode_time` gets its own
        (bound to ``num_seqs``): whatever it does per iteration still happens. O(1) per call of the function."""
        if type(self).decode_time is not CostModel.decode_time:
            return partial(self.decode_time, num_seqs)
        m, g = self.model, self.server.num_gpus
        base = self.linear_time(num_seqs, num_seqs) + self._fixed_time(num_seqs)
        kv_bytes, bw, slowdown, bs = m.kv_bytes_per_token, self._bw, self.attention_slowdown, self.block_size
        cpu = self.cpu_scale
        if not cpu:  # host_time is 0.0
            return lambda context_tokens: base + context_tokens * kv_bytes / g / bw * slowdown + 0.0
        fixed = ITERATION_OVERHEAD_S + num_seqs * (SCHEDULER_PER_SEQ_S + PREPARE_INPUTS_PER_SEQ_S + SAMPLING_PER_SEQ_S)
        issue, token_bytes, pcie = INPUT_COPIES * SWAP_COPY_LATENCY_S, num_seqs * INPUT_BYTES_PER_TOKEN, \
            self.server.pcie_bytes_per_s
        return lambda context_tokens: (
            base + context_tokens * kv_bytes / g / bw * slowdown
            + cpu * (fixed + (issue + (token_bytes + (context_tokens / bs + num_seqs + num_seqs) * INT32_BYTES)
                              / pcie)))

    def prefill_time(self, prompt_lens: list[int]) -> float:
        """Seconds for one prefill iteration over prompts of ``prompt_lens`` tokens each
        (a recomputation passes prompt + generated tokens)."""
        m, g = self.model, self.server.num_gpus
        n = sum(prompt_lens)
        attn_flops = sum(2 * m.num_layers * m.attention_flops_width * p * p for p in prompt_lens)
        attn = attn_flops / g / (self.server.peak_flops * self.compute_efficiency)
        kv_write = n * m.kv_bytes_per_token / g / self._bw
        return (self.linear_time(n, len(prompt_lens)) + attn + kv_write + self._fixed_time(n)
                + self.host_time(len(prompt_lens), n, 0))

    def kv_copy_time(self, num_tokens: int) -> float:
        """Seconds to copy the KV of ``num_tokens`` tokens inside device memory (all layers, K and V):
        ``2 · tokens · KV bytes per token / g / achieved HBM bandwidth`` (each byte read and written).
        A contiguous system's fork of a ``t``-token beam costs ``kv_copy_time(t)`` (§4.4)."""
        if num_tokens <= 0:
            return 0.0
        return 2 * num_tokens * self.model.kv_bytes_per_token / self.server.num_gpus / self._bw

    def block_copy_time(self, num_blocks: int) -> float:
        """Seconds of ``num_blocks`` copy-on-write copies of ``block_size``-token blocks (§4.4),
        ``kv_copy_time(num_blocks · block_size)``."""
        return self.kv_copy_time(num_blocks * self.block_size)

    def swap_time(self, num_blocks: int, block_size: int | None = None) -> float:
        """Seconds to move ``num_blocks`` KV blocks one way over PCIe (§4.5, Fig. 19a).

        One copy per block, per layer, for K and for V (vLLM v0's swap), each
        ``SWAP_COPY_LATENCY_S`` plus its bytes at the effective PCIe bandwidth; GPUs of a
        tensor-parallel server swap their shares in parallel.
        """
        if num_blocks <= 0:
            return 0.0
        m, g = self.model, self.server.num_gpus
        bs = self.block_size if block_size is None else block_size
        copy_bytes = bs * m.num_kv_heads * m.head_size * m.dtype_bytes / g
        copies = num_blocks * m.num_layers * 2
        return copies * (SWAP_COPY_LATENCY_S + copy_bytes / self.server.pcie_bytes_per_s)


def get_cost_model(model, *, block_size: int, gpu: str | None = None, tp: int | None = None,
                   max_seq_len: int | None = None, paged_kernel: bool = True, cpu_scale: float = 1.0,
                   memory_efficiency: float = MEMORY_EFFICIENCY,
                   compute_efficiency: float = COMPUTE_EFFICIENCY) -> CostModel:
    """The cost model of ``model`` on a server: a Table 1 preset (``opt-13b``, ``opt-66b``,
    ``opt-175b``, ``llama-13b``) on its Table 1 server, or any model on ``tp`` GPUs ``gpu``
    (:func:`paged.sim.deployment.get_deployment`: a shipped config name such as ``llama-3.1-8b``, a
    ``config.json`` path or a :class:`~paged.sim.model_spec.ModelSpec`, with ``gpu`` one of
    :data:`paged.sim.gpu_spec.GPUS`; or a deployment name ``llama-3.1-8b@2xh100-sxm:8192``).
    Every constant of the module docstring applies unchanged to every GPU.

    ``memory_efficiency`` / ``compute_efficiency``: the achieved fractions of HBM bandwidth and of
    peak FLOP/s (defaults: the central values; :data:`EFFICIENCY_RANGES` holds the sourced ends).

    Raises:
        ValueError: for an unknown model or GPU, a ``block_size`` that is not an integer ≥ 1 (tokens), a
            ``cpu_scale`` that is not a finite number ≥ 0, an efficiency outside (0, 1], a model outside
            Table 1 without a ``gpu``, a ``tp`` that does not divide the heads;
            :class:`~paged.sim.deployment.ModelDoesNotFitError` (a ValueError) naming the bytes for a
            model that does not fit; TypeError for a model that is not a name, path or spec.
    """
    if isinstance(block_size, bool) or not isinstance(block_size, numbers.Integral) or block_size < 1:
        raise ValueError(f"block_size must be an integer ≥ 1 (tokens), got {block_size!r}")
    if isinstance(cpu_scale, bool) or not isinstance(cpu_scale, numbers.Real) or not 0 <= cpu_scale < float("inf"):
        raise ValueError(f"cpu_scale must be a finite number ≥ 0, got {cpu_scale!r}")
    for name, value in (("memory_efficiency", memory_efficiency), ("compute_efficiency", compute_efficiency)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value <= 1:
            raise ValueError(f"{name} must be a fraction in (0, 1], got {value!r}")
    if not isinstance(model, (str, os.PathLike, ModelSpec)):
        get_model(model)  # the TypeError naming the presets
    plan = get_deployment(model, gpu, tp, max_seq_len)
    if plan is None:
        spec = get_model(model)
        return CostModel(spec, SERVERS[spec.name], block_size, paged_kernel, float(cpu_scale),
                         float(memory_efficiency), float(compute_efficiency))
    g = plan.gpu
    server = ServerSpec(plan.server_name, plan.tp, g.peak_flops, g.hbm_bytes_per_s, g.interconnect_bytes_per_s,
                        g.pcie_bytes_per_s, plan.kv_cache_bytes)
    return CostModel(plan.model, server, block_size, paged_kernel, float(cpu_scale),
                     float(memory_efficiency), float(compute_efficiency))


#: The sourced low and high ends of the efficiency factors (see the constants), for a sensitivity
#: panel: name (a :func:`get_cost_model` keyword) -> (low, central, high).
EFFICIENCY_RANGES = {
    "memory_efficiency": (MEMORY_EFFICIENCY_RANGE[0], MEMORY_EFFICIENCY, MEMORY_EFFICIENCY_RANGE[1]),
    "compute_efficiency": (COMPUTE_EFFICIENCY_RANGE[0], COMPUTE_EFFICIENCY, COMPUTE_EFFICIENCY_RANGE[1]),
}


#: The host (CPU) costs of one iteration, for tables: name -> (seconds, what it is per).
HOST_COSTS = {
    "fixed per iteration": (ITERATION_OVERHEAD_S, "iteration"),
    "scheduler": (SCHEDULER_PER_SEQ_S, "sequence"),
    "input preparation": (PREPARE_INPUTS_PER_SEQ_S, "sequence"),
    "sampling and output processing": (SAMPLING_PER_SEQ_S, "sequence"),
    "input copies (issue latency)": (INPUT_COPIES * SWAP_COPY_LATENCY_S, "iteration"),
}
