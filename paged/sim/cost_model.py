"""A GPU cost model: how long one serving iteration takes on the paper's servers (§6.1, Table 1).

Only *time* is modelled; memory always comes from the real KV cache managers. An iteration is a
prefill (every prompt token of the admitted requests) or a decode (one token per running sequence),
on ``g`` GPUs with tensor parallelism (each holds ``1/g`` of every weight matrix and KV head). Its
GPU time is built from operators as Vidur's profiles measure them (:mod:`paged.sim.gpu_measurements`,
``data/vidur_*.csv``; tests/sim/test_gpu_measurements.py compares each term with the measured medians):

* **GEMMs**: weight bytes at the GPU's measured fraction of HBM bandwidth and FLOPs at its measured
  fraction of peak, blended (``(mᵖ + cᵖ)^(1/p)``, between the memory and compute limits the measured
  kernels are slower than either alone) plus a floor per kernel; the LM head only for sampled tokens;
* **element-wise operators** (norms, activation, residual add, rotary embedding): a floor per layer plus
  their bytes at a measured fraction of HBM bandwidth;
* **attention**: decode reads every context token's KV (memory bound), scaled for the paged kernel by the
  paper's measured overhead and a per-block overhead that grows as blocks shrink; prefill computes causal
  attention (``2 · layers · hidden · n²`` FLOPs) at the measured prefill kernel's fraction of peak; a
  floor per layer for the kernel and the KV write;
* **all-reduce**: two per layer under tensor parallelism, NCCL's measured latency plus the ring's bus bytes
  at its measured bus bandwidth, by GPU and GPU count;
* **host (CPU) costs**, serial with the GPU as in the 2023 vLLM: per iteration, per running sequence
  (scheduler, input preparation, sampling and output processing) and the step's host→device copies;
  all × ``cpu_scale`` (0 for FasterTransformer's C++ loop, :meth:`paged.sim.config.ServingConfig.cost_model`);
* **swapping** (§4.5): one PCIe copy per block, per layer, for K and for V, each with an issue latency;
  **recomputation** is the prefill of prompt + generated tokens; **KV copies** inside device memory
  (§4.4: a copy-on-write block, or Orca's copy of a forked beam) read and write each byte once.

Every constant cites its source (the measured ones, the fit that gives them); three are stated assumptions
with a range (:data:`ASSUMPTION_RANGES`: the per-iteration host cost, the paged kernel's per-block overhead,
the copy issue latency), each varied by a panel of notebook 03. Nothing is fitted to the paper's figures.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from paged.sim.deployment import get_deployment
from paged.sim.gpu_spec import A100_MEASURED, GPUS, GPUSpec
from paged.sim.iteration_cost import IterationCostModel
from paged.sim.model_spec import GiB, ModelSpec, get_model, kv_cache_slots

__all__ = ["ServerSpec", "CostModel", "SERVERS", "PRESETS", "get_cost_model", "A100_PEAK_FP16_FLOPS",
           "A100_40GB_HBM_BYTES_PER_S", "A100_80GB_HBM_BYTES_PER_S", "NVLINK_BYTES_PER_S",
           "PCIE4_X16_BYTES_PER_S", "HOST_COSTS", "EFFICIENCY_RANGES", "MEMORY_EFFICIENCY", "COMPUTE_EFFICIENCY",
           "MEMORY_EFFICIENCY_RANGE", "COMPUTE_EFFICIENCY_RANGE", "ASSUMPTION_RANGES", "elementwise_bytes_per_token"]

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

#: Fraction of peak HBM bandwidth GEMMs stream weights at on an A100, and (decode attention) KV at.
#: Measured: the least-squares fit of Vidur's A100 GEMM medians (:data:`paged.sim.gpu_spec.A100_MEASURED`,
#: :func:`paged.sim.gpu_measurements.fit_gemm_law`); each GPU has its own (:class:`~paged.sim.gpu_spec.GPUSpec`).
MEMORY_EFFICIENCY = A100_MEASURED["memory_efficiency"]
#: Fraction of peak Tensor Core FLOP/s an A100's GEMMs reach (the same fit).
COMPUTE_EFFICIENCY = A100_MEASURED["compute_efficiency"]
#: Ends of the A100 memory efficiency for the sensitivity panel: the lowest and highest of the same fit
#: done per profiled (model, tensor-parallel degree), 15 of them (tests/sim/test_gpu_measurements.py).
#: Earlier published A100 figures sit near or below the low end: FasterTransformer's GPT-20B batch-1
#: decode, a whole step, 0.71 of 2,039 GB/s (NVIDIA/FasterTransformer docs/gpt_guide.md).
MEMORY_EFFICIENCY_RANGE = (0.74, 0.86)
#: Ends of the A100 compute efficiency (the same per-configuration fits). Megatron-LM's end-to-end
#: training reaches 0.52 of peak on A100 (Narayanan et al., SC'21), its GEMMs alone more.
COMPUTE_EFFICIENCY_RANGE = (0.68, 0.78)
#: How the measured GEMMs sit between the memory and compute limits: ``t = (mᵖ + cᵖ)^(1/p)``
#: (``p = ∞`` is the hard roofline) plus :data:`GEMM_KERNEL_FLOOR_S` per kernel. Measured: the same
#: fit over both GPUs (:func:`paged.sim.gpu_measurements.fit_gemm_law`: p = 1.75, floor 6 µs; median
#: error 0 %, 90 % of layers within ±13 %). The hard roofline with fitted efficiencies misses the
#: 128–512-token knee by up to 39 % (too fast).
GEMM_BLEND_EXPONENT = 1.75
#: Fixed time of one GEMM kernel (seconds), measured with the blend above.
GEMM_KERNEL_FLOOR_S = 6e-6
#: Element-wise operators of one layer (two norms, rotary embedding, activation, residual add): a floor
#: per layer and their bytes (:func:`elementwise_bytes_per_token`) at a
#: fraction of HBM bandwidth. Measured: :func:`paged.sim.gpu_measurements.fit_elementwise_law` over
#: both GPUs (16 µs, 0.61; rms error 25 %: the profiled models' floors differ, 12–49 µs at one token).
ELEMENTWISE_FLOOR_S = 16e-6
ELEMENTWISE_EFFICIENCY = 0.61
#: Fixed time of one layer's attention kernel (seconds). Measured: FlashInfer's decode attention at
#: batch 1 and 128 tokens of context on an A100 takes 10 µs (data/vidur_attention_medians.csv), of
#: which its 0.5 MB of KV accounts for 0.3 µs.
ATTENTION_FLOOR_S = 10e-6
#: Fixed time of one layer's KV-cache write (seconds). Measured: 2 µs at every decode point (same file).
KV_WRITE_FLOOR_S = 2e-6
#: Fraction of peak FLOP/s the prefill attention kernel reaches. Measured: FlashInfer's causal
#: prefill of 2,048 tokens on an A100 (Meta-Llama-3-8B: 2 · 2048² · 4096 FLOPs per layer in 317 µs) is
#: 0.35 of 312 TFLOP/s; shorter prompts reach less (the floor above covers most of their time).
PREFILL_ATTENTION_EFFICIENCY = 0.35
#: Fixed per-iteration host overhead (seconds): scheduling, preparing inputs, sampling, Python, the part
#: that does not grow with the batch (the per-sequence parts follow). Assumption for a 2023 vLLM-like
#: Python server without CUDA graphs; its range (:data:`ASSUMPTION_RANGES`: none to 2 ms) is bounded
#: by the whole step's measured host time, 5–13 ms at 256 sequences (RFC #6854, below), and varied by
#: notebook 03's panels. A host cost: scaled by ``cpu_scale``.
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
#: Extra latency of the paged attention kernel over a contiguous one at block size 16. Source:
#: the paper's own kernel measurement, §7.1 / Fig. 18a ("20–26% higher"); we take the low end. It is
#: vLLM 0.1's kernel's: the 2024 FlashInfer kernel of the measured tables reads KV at 0.74–0.85 of HBM
#: bandwidth at large batch × context, as fast as the contiguous kernel modelled here.
PAGED_KERNEL_OVERHEAD = 1.2
#: Per-block overhead of the paged kernel, in token rows of equivalent memory traffic. Assumption:
#: each block costs one dependent block-table load plus a partly used memory transaction, about one
#: extra token row; it makes blocks below ~8 tokens slow (Fig. 18b's small-block side). Range
#: (:data:`ASSUMPTION_RANGES`) 0.15–2: the low end is a measured modern kernel (page size 1 costs
#: 13–18 % more than 16 in a 2026 paged-attention kernel, ROCm/FlyDSL PR #1066, i.e. 0.15 rows per
#: page); the high end two rows.
PAGED_BLOCK_OVERHEAD_TOKENS = 1.0
#: Issue latency of one host↔device cudaMemcpyAsync (seconds). Assumption: a few µs per copy;
#: vLLM v0 issues one copy per block, per layer, for K and for V, so small blocks swap slowly.
#: Range 2–10 µs (:data:`ASSUMPTION_RANGES`): vLLM PR #11531 measured v0's per-block copies on an
#: A100-40GB at 3.1 GB/s for 1,250 blocks against 12.6 GB/s batched, which is 9 µs per copy if its
#: blocks held 32 KB (its page size is not stated); 2 µs is a bare driver call.
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
        gpu: the GPU's key in :data:`paged.sim.gpu_spec.GPUS`, whose measured efficiencies and
            all-reduce figures the cost model uses.
    """

    name: str
    num_gpus: int
    peak_flops: float
    hbm_bytes_per_s: float
    nvlink_bytes_per_s: float
    pcie_bytes_per_s: float
    kv_cache_bytes: int
    gpu: str = "a100-40gb"

    @property
    def gpu_spec(self) -> GPUSpec:
        """The server's GPU (:data:`paged.sim.gpu_spec.GPUS`)."""
        return GPUS[self.gpu]

    @property
    def allreduce_law(self) -> tuple[float, float]:
        """``(latency s, bus bytes/s)`` of one all-reduce over this server's GPUs (measured)."""
        return self.gpu_spec.allreduce_law(self.num_gpus)


def _a100(num_gpus: int, hbm: float, kv_gib: float) -> ServerSpec:
    size = "80GB" if hbm == A100_80GB_HBM_BYTES_PER_S else "40GB"
    return ServerSpec(f"{num_gpus}xA100-{size}", num_gpus, A100_PEAK_FP16_FLOPS, hbm, NVLINK_BYTES_PER_S,
                      PCIE4_X16_BYTES_PER_S, int(kv_gib * GiB), f"a100-{size.lower()}")


#: Table 1's servers, keyed by the model they serve. KV cache memory is Table 1's (12, 21 and
#: 264 GB, read as GiB: 12 GiB / 800 KiB = 15.7K slots as in Table 1). LLaMA-13B's server is not
#: stated; it has OPT-13B's size and KV bytes per token, so it gets the same 1×A100-40GB, 12 GiB.
#: The paper's servers are Google Cloud A2 machines, whose A100s share an NVSwitch fabric as in the
#: measured DGX A100 nodes.
SERVERS: dict[str, ServerSpec] = {
    "opt-13b": _a100(1, A100_40GB_HBM_BYTES_PER_S, 12),
    "opt-66b": _a100(4, A100_40GB_HBM_BYTES_PER_S, 21),
    "opt-175b": _a100(8, A100_80GB_HBM_BYTES_PER_S, 264),
    "llama-13b": _a100(1, A100_40GB_HBM_BYTES_PER_S, 12),
}
PRESETS = tuple(SERVERS)


def elementwise_bytes_per_token(hidden: int, intermediate: int, tp: int, *, gated: bool = True,
                                rotary: bool = True, dtype_bytes: int = 2) -> float:
    """Bytes one layer's element-wise operators move per token on one of ``tp`` GPUs: two norms
    (read and write ``hidden``: 4h), the residual add as profiled (read two, write one: 3h), the
    activation (a gated one reads ``2·intermediate/tp`` and writes half; ReLU reads and writes
    ``intermediate/tp``) and the rotary embedding (reads and writes Q and K: ``4·hidden/tp``; none
    for learned positions, OPT)."""
    act = (3 if gated else 2) * intermediate / tp
    rope = 4 * hidden / tp if rotary else 0.0
    return dtype_bytes * (7 * hidden + act + rope)


def _mlp_is_gated(model: ModelSpec) -> bool:
    """Whether ``model``'s MLP has three matrices (SwiGLU / GeGLU) rather than OPT's two, from its
    parameter count (every preset and config counts attention + MLP per layer, :mod:`paged.sim.model_spec`)."""
    h, head = model.hidden_size, model.head_size
    attn = h * head * (model.num_heads + 2 * model.num_kv_heads) + model.num_heads * head * h
    mlp = model.matmul_params / model.num_layers - attn
    return mlp > 2.5 * h * model.intermediate_size


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
        memory_efficiency: achieved fraction of HBM bandwidth (None: the server GPU's measured one;
            the A100's measured ends are :data:`MEMORY_EFFICIENCY_RANGE`).
        compute_efficiency: achieved fraction of peak Tensor Core FLOP/s (None: the GPU's measured one;
            A100 ends :data:`COMPUTE_EFFICIENCY_RANGE`).
        iteration_overhead_s, block_overhead_tokens, copy_latency_s: the three stated assumptions
            (:data:`ITERATION_OVERHEAD_S`, :data:`PAGED_BLOCK_OVERHEAD_TOKENS`, :data:`SWAP_COPY_LATENCY_S`;
            ranges in :data:`ASSUMPTION_RANGES`), fields so that a sensitivity panel can vary them.
    """

    model: ModelSpec
    server: ServerSpec
    block_size: int
    paged_kernel: bool = True
    cpu_scale: float = 1.0
    memory_efficiency: float | None = None
    compute_efficiency: float | None = None
    iteration_overhead_s: float = ITERATION_OVERHEAD_S
    block_overhead_tokens: float = PAGED_BLOCK_OVERHEAD_TOKENS
    copy_latency_s: float = SWAP_COPY_LATENCY_S

    def __post_init__(self):
        gpu = self.server.gpu_spec
        if self.memory_efficiency is None:
            object.__setattr__(self, "memory_efficiency", gpu.memory_efficiency)
        if self.compute_efficiency is None:
            object.__setattr__(self, "compute_efficiency", gpu.compute_efficiency)

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

    # -- operators (one GPU of the server; seconds) -------------------------------------
    def gemm_time(self, weights: float, num_tokens: float, num_kernels: int = 1) -> float:
        """Seconds to multiply ``num_tokens`` rows through ``weights`` parameters held on one GPU, in
        ``num_kernels`` GEMMs: the blend of the memory and compute limits plus a floor per kernel
        (:data:`GEMM_BLEND_EXPONENT`, :data:`GEMM_KERNEL_FLOOR_S`)."""
        p = GEMM_BLEND_EXPONENT
        memory = weights * self.model.dtype_bytes / self._bw
        compute = 2 * weights * num_tokens / (self.server.peak_flops * self.compute_efficiency)
        return (memory**p + compute**p) ** (1 / p) + num_kernels * GEMM_KERNEL_FLOOR_S

    def linear_limits(self, num_tokens: float) -> tuple[float, float]:
        """``(memory s, compute s)``: the two limits of the layers' GEMMs on one GPU for ``num_tokens``
        tokens, before the blend and the floors (the iteration is compute bound where the second is larger)."""
        weights, g = self.model.matmul_params, self.server.num_gpus
        return (weights / g * self.model.dtype_bytes / self._bw,
                2 * weights / g * num_tokens / (self.server.peak_flops * self.compute_efficiency))

    def elementwise_time(self, num_tokens: float) -> float:
        """Seconds of one layer's element-wise operators over ``num_tokens`` tokens on one GPU."""
        m, g = self.model, self.server.num_gpus
        gated = _mlp_is_gated(m)  # the shipped non-gated models (OPT) use learned positions, not rotary
        per_token = elementwise_bytes_per_token(m.hidden_size, m.intermediate_size, g, gated=gated, rotary=gated,
                                                dtype_bytes=m.dtype_bytes)
        return ELEMENTWISE_FLOOR_S + num_tokens * per_token / (self.server.hbm_bytes_per_s * ELEMENTWISE_EFFICIENCY)

    def allreduce_time(self, num_tokens: float) -> float:
        """Seconds of one all-reduce of ``num_tokens`` tokens' activations (``hidden`` elements each)
        across the server's GPUs: the measured latency plus the ring's bus bytes
        (``2(g−1)/g`` × the message) at the measured bus bandwidth; 0 on one GPU."""
        g = self.server.num_gpus
        if g == 1:
            return 0.0
        latency, bus = self.server.allreduce_law
        return latency + 2 * (g - 1) / g * num_tokens * self.model.hidden_size * self.model.dtype_bytes / bus

    def decode_attention_time(self, context_tokens: float) -> float:
        """Seconds of one layer's decode attention over ``context_tokens`` cached tokens on one GPU
        (the kernel's and the KV write's floors included; the paged kernel's overhead applied)."""
        m, g = self.model, self.server.num_gpus
        kv_read = context_tokens * m.kv_bytes_per_token / m.num_layers / g / self._bw * self.attention_slowdown
        return ATTENTION_FLOOR_S + KV_WRITE_FLOOR_S + kv_read

    def prefill_attention_time(self, prompt_lens: list[int]) -> float:
        """Seconds of one layer's causal prefill attention over prompts of ``prompt_lens`` tokens on
        one GPU, the KV write included (its bytes at HBM speed)."""
        m, g = self.model, self.server.num_gpus
        flops = sum(2 * m.attention_flops_width * p * p for p in prompt_lens)
        kv_write = sum(prompt_lens) * m.kv_bytes_per_token / m.num_layers / g / self._bw
        return (ATTENTION_FLOOR_S + KV_WRITE_FLOOR_S + flops / g / (self.server.peak_flops * PREFILL_ATTENTION_EFFICIENCY)
                + kv_write)

    def _gpu_time(self, num_tokens: int, num_logits: int) -> float:
        """Every GPU second of an iteration but attention's reads and FLOPs: the layers' GEMMs, the LM
        head for ``num_logits`` tokens, element-wise operators, attention floors, two all-reduces per layer."""
        m, g = self.model, self.server.num_gpus
        layers = self.gemm_time(m.matmul_params / g, num_tokens, 4 * m.num_layers)
        head = self.gemm_time(m.embedding_params / g, num_logits, 1)
        per_layer = self.elementwise_time(num_tokens) + ATTENTION_FLOOR_S + KV_WRITE_FLOOR_S + 2 * self.allreduce_time(
            num_tokens)
        return layers + head + m.num_layers * per_layer

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
        copies = INPUT_COPIES * self.copy_latency_s + copy_bytes / self.server.pcie_bytes_per_s
        return self.cpu_scale * (self.iteration_overhead_s + num_seqs * per_seq + copies)

    @property
    def attention_slowdown(self) -> float:
        """Paged-kernel attention time ÷ contiguous-kernel attention time (≥ 0.9)."""
        if not self.paged_kernel:
            return 1.0
        c = self.block_overhead_tokens
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
        return self._gpu_time(num_seqs, num_seqs) + kv_read + self.host_time(num_seqs, num_seqs, entries)

    def decode_time_of(self, num_seqs: int) -> Callable[[int], float]:
        """:meth:`decode_time` of ``num_seqs`` sequences as a function of the context tokens alone: the
        terms that do not depend on the context computed once, the others with the same operations in the
        same order, so it returns exactly the same seconds (for loops that run many decode iterations of
        one batch, the simulator's calendars). A subclass that overrides :meth:`decode_time` gets its own
        (bound to ``num_seqs``): whatever it does per iteration still happens. O(1) per call of the function."""
        if type(self).decode_time is not CostModel.decode_time:
            return partial(self.decode_time, num_seqs)
        m, g = self.model, self.server.num_gpus
        base = self._gpu_time(num_seqs, num_seqs)
        kv_bytes, bw, slowdown, bs = m.kv_bytes_per_token, self._bw, self.attention_slowdown, self.block_size
        cpu = self.cpu_scale
        if not cpu:  # host_time is 0.0
            return lambda context_tokens: base + context_tokens * kv_bytes / g / bw * slowdown + 0.0
        fixed = self.iteration_overhead_s + num_seqs * (SCHEDULER_PER_SEQ_S + PREPARE_INPUTS_PER_SEQ_S
                                                        + SAMPLING_PER_SEQ_S)
        issue, token_bytes, pcie = INPUT_COPIES * self.copy_latency_s, num_seqs * INPUT_BYTES_PER_TOKEN, \
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
        attn = attn_flops / g / (self.server.peak_flops * PREFILL_ATTENTION_EFFICIENCY)
        kv_write = n * m.kv_bytes_per_token / g / self._bw
        return self._gpu_time(n, len(prompt_lens)) + attn + kv_write + self.host_time(len(prompt_lens), n, 0)

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
        ``copy_latency_s`` plus its bytes at the effective PCIe bandwidth; GPUs of a
        tensor-parallel server swap their shares in parallel.
        """
        if num_blocks <= 0:
            return 0.0
        m, g = self.model, self.server.num_gpus
        bs = self.block_size if block_size is None else block_size
        copy_bytes = bs * m.num_kv_heads * m.head_size * m.dtype_bytes / g
        copies = num_blocks * m.num_layers * 2
        return copies * (self.copy_latency_s + copy_bytes / self.server.pcie_bytes_per_s)


def get_cost_model(model, *, block_size: int, gpu: str | None = None, tp: int | None = None,
                   max_seq_len: int | None = None, paged_kernel: bool = True, cpu_scale: float = 1.0,
                   memory_efficiency: float | None = None, compute_efficiency: float | None = None) -> CostModel:
    """The cost model of ``model`` on a server: a Table 1 preset (``opt-13b``, ``opt-66b``,
    ``opt-175b``, ``llama-13b``) on its Table 1 server, or any model on ``tp`` GPUs ``gpu``
    (:func:`paged.sim.deployment.get_deployment`: a shipped config name such as ``llama-3.1-8b``, a
    ``config.json`` path or a :class:`~paged.sim.model_spec.ModelSpec`, with ``gpu`` one of
    :data:`paged.sim.gpu_spec.GPUS`; or a deployment name ``llama-3.1-8b@2xh100-sxm:8192``).
    The measured figures are the server GPU's (:class:`~paged.sim.gpu_spec.GPUSpec`); the other
    constants of the module docstring apply to every GPU.

    ``memory_efficiency`` / ``compute_efficiency``: the achieved fractions of HBM bandwidth and of
    peak FLOP/s (None: the GPU's measured ones; :data:`EFFICIENCY_RANGES` holds the A100's measured ends).

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
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value <= 1):
            raise ValueError(f"{name} must be a fraction in (0, 1], got {value!r}")
    if not isinstance(model, (str, os.PathLike, ModelSpec)):
        get_model(model)  # the TypeError naming the presets
    eff = (None if memory_efficiency is None else float(memory_efficiency),
           None if compute_efficiency is None else float(compute_efficiency))
    plan = get_deployment(model, gpu, tp, max_seq_len)
    if plan is None:
        spec = get_model(model)
        return CostModel(spec, SERVERS[spec.name], block_size, paged_kernel, float(cpu_scale), *eff)
    g = plan.gpu
    server = ServerSpec(plan.server_name, plan.tp, g.peak_flops, g.hbm_bytes_per_s, g.interconnect_bytes_per_s,
                        g.pcie_bytes_per_s, plan.kv_cache_bytes, g.name)
    return CostModel(plan.model, server, block_size, paged_kernel, float(cpu_scale), *eff)


#: The A100's measured low and high ends of the efficiency factors (see the constants), for a
#: sensitivity panel: name (a :func:`get_cost_model` keyword) -> (low, central, high).
EFFICIENCY_RANGES = {
    "memory_efficiency": (MEMORY_EFFICIENCY_RANGE[0], MEMORY_EFFICIENCY, MEMORY_EFFICIENCY_RANGE[1]),
    "compute_efficiency": (COMPUTE_EFFICIENCY_RANGE[0], COMPUTE_EFFICIENCY, COMPUTE_EFFICIENCY_RANGE[1]),
}
#: The stated assumptions' ranges, for sensitivity panels: :class:`CostModel` field -> (low, central, high)
#: (sources at each constant).
ASSUMPTION_RANGES = {
    "iteration_overhead_s": (0.0, ITERATION_OVERHEAD_S, 2e-3),
    "block_overhead_tokens": (0.15, PAGED_BLOCK_OVERHEAD_TOKENS, 2.0),
    "copy_latency_s": (2e-6, SWAP_COPY_LATENCY_S, 10e-6),
}


#: The host (CPU) costs of one iteration, for tables: name -> (seconds, what it is per).
HOST_COSTS = {
    "fixed per iteration": (ITERATION_OVERHEAD_S, "iteration"),
    "scheduler": (SCHEDULER_PER_SEQ_S, "sequence"),
    "input preparation": (PREPARE_INPUTS_PER_SEQ_S, "sequence"),
    "sampling and output processing": (SAMPLING_PER_SEQ_S, "sequence"),
    "input copies (issue latency)": (INPUT_COPIES * SWAP_COPY_LATENCY_S, "iteration"),
}
