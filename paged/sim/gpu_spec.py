"""GPUs from their vendors' datasheets: memory, HBM bandwidth, dense FP16/BF16 FLOP/s, interconnect.

The simulator's servers (:mod:`paged.sim.cost_model`) are ``tp`` identical GPUs running one model
with tensor parallelism. Table 1's servers are A100s; this table adds the GPUs LLMs are served on
today, so that the paper's comparison can be repeated on them (:mod:`paged.sim.deployment`).

Every number is the vendor's, as printed in the datasheet named beside it; "with sparsity" FLOP/s
are halved to the dense figure (the datasheets' own footnote: sparsity doubles the dense peak), and
bidirectional interconnect totals are halved to one direction (the cost model's all-reduce moves
data one way per link). Memory capacities are the datasheets' "GB" read as GiB, as the HBM stacks
are binary-sized (A100: 5 × 8 GiB, H100: 5 × 16 GiB); the small difference to the usable memory
``nvidia-smi`` reports is inside the 10% the serving system leaves unused
(:data:`paged.sim.deployment.GPU_MEMORY_UTILIZATION`).

Beside the datasheet, each GPU carries what measured kernels reach on it (:mod:`paged.sim.gpu_measurements`:
Vidur's A100 and H100 profiles): the fractions of HBM bandwidth and of peak FLOP/s its GEMMs achieve and
NCCL's all-reduce latency and bus bandwidth inside one NVSwitch node, by GPU count. The A100-40GB takes
the profiled A100-80GB's figures (same SMs, same NVLink 3), the H200 the H100's (same chip, same NVLink
4); the L4 was not profiled and takes the A100's fractions and, over PCIe, the A100's all-reduce latency
with its bus bandwidth at the A100's measured fraction of the link (:data:`UNMEASURED_NOTE`).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GPUSpec", "GPUS", "get_gpu", "PCIE_EFFICIENCY", "A100_MEASURED", "H100_MEASURED", "UNMEASURED_NOTE"]

_GiB = 1024**3

#: Fraction of the raw PCIe bandwidth that pinned host↔device copies reach: the cost model's A100
#: value, 25 GB/s effective of PCIe 4.0 x16's 31.5 GB/s per direction
#: (:data:`paged.sim.cost_model.PCIE4_X16_BYTES_PER_S`), applied to PCIe 5.0 too.
PCIE_EFFICIENCY = 25e9 / 31.5e9
#: PCIe raw bandwidth per direction of an x16 link (bytes/s): PCI-SIG, 4.0 = 16 GT/s × 16 lanes ×
#: 128b/130b ≈ 31.5 GB/s; 5.0 = 32 GT/s, ≈ 63 GB/s (NVIDIA's datasheets: 64 and 128 GB/s
#: bidirectional).
_PCIE4_X16 = 31.5e9
_PCIE5_X16 = 63e9

#: What Vidur's profiles measure on an A100 (:func:`paged.sim.gpu_measurements.fit_gemm_law` and
#: :func:`~paged.sim.gpu_measurements.fit_all_reduce_law`, refitted in tests/sim/test_gpu_measurements.py):
#: GEMMs stream weights at 0.82 of 2,039 GB/s and compute at 0.74 of 312 TFLOP/s; an all-reduce over
#: ``w`` GPUs of a DGX A100 costs ``α`` plus its bus bytes at ``β``: ``((w, α s, β bytes/s), ...)``.
A100_MEASURED = {"memory_efficiency": 0.82, "compute_efficiency": 0.74,
                 "allreduce": ((2, 47.6e-6, 357e9), (4, 27.8e-6, 288e9), (8, 39.3e-6, 292e9))}
#: The same on an H100 SXM (DGX H100): 0.95 of 3.35 TB/s, 0.73 of 989.5 TFLOP/s.
H100_MEASURED = {"memory_efficiency": 0.95, "compute_efficiency": 0.73,
                 "allreduce": ((2, 33.2e-6, 749e9), (4, 35.8e-6, 873e9), (8, 28.2e-6, 687e9))}
#: Why a GPU without a profile gets the figures it gets.
UNMEASURED_NOTE = ("not profiled: the A100's measured efficiencies; all-reduce at the A100's measured latency and "
                   "its measured bus bandwidth ÷ NVLink 3 bandwidth times this link's")


@dataclass(frozen=True, slots=True)
class GPUSpec:
    """One GPU's datasheet figures.

    Attributes:
        name: lower-case key, e.g. ``"h100-sxm"``.
        label: the product name, e.g. ``"H100 SXM 80GB"``.
        memory_bytes: device memory (bytes).
        hbm_bytes_per_s: peak memory bandwidth (bytes/s).
        peak_flops: dense FP16/BF16 Tensor Core peak (FLOP/s), no sparsity.
        interconnect: what tensor parallelism communicates over (``"NVLink 3"``, ``"PCIe 4.0 x16"``).
        interconnect_bytes_per_s: GPU↔GPU bandwidth per GPU and direction (bytes/s).
        pcie_bytes_per_s: effective host↔device bandwidth (bytes/s; :data:`PCIE_EFFICIENCY` × raw).
        source: the datasheet the figures come from.
        memory_efficiency: measured fraction of ``hbm_bytes_per_s`` GEMMs stream weights at.
        compute_efficiency: measured fraction of ``peak_flops`` large GEMMs reach.
        allreduce: measured NCCL all-reduce inside one node: ``((gpus, latency s, bus bytes/s), ...)``.
        measured: where the last three come from.
    """

    name: str
    label: str
    memory_bytes: int
    hbm_bytes_per_s: float
    peak_flops: float
    interconnect: str
    interconnect_bytes_per_s: float
    pcie_bytes_per_s: float
    source: str
    memory_efficiency: float = A100_MEASURED["memory_efficiency"]
    compute_efficiency: float = A100_MEASURED["compute_efficiency"]
    allreduce: tuple = A100_MEASURED["allreduce"]
    measured: str = "Vidur's A100 profiles"

    def allreduce_law(self, num_gpus: int) -> tuple[float, float]:
        """``(latency seconds, bus bytes/s)`` of one all-reduce over ``num_gpus`` of these GPUs: the
        measured group of that size, else the largest measured one below it (the smallest above it for
        fewer GPUs than any measured group)."""
        rows = sorted(self.allreduce)
        below = [r for r in rows if r[0] <= num_gpus]
        _, latency, bus = below[-1] if below else rows[0]
        return latency, bus

    @property
    def ridge_flops_per_byte(self) -> float:
        """Peak FLOP/s ÷ peak memory bandwidth (FLOP/byte): a kernel of lower arithmetic
        intensity is memory bound on this GPU (roofline)."""
        return self.peak_flops / self.hbm_bytes_per_s


_A100 = "NVIDIA A100 Tensor Core GPU datasheet (2021): FP16 Tensor Core 312 TFLOPS (624 with sparsity), "
#: The GPUs, by key. Sources: the vendor datasheets quoted in each ``source``.
GPUS: dict[str, GPUSpec] = {g.name: g for g in (
    GPUSpec("a100-40gb", "A100 SXM 40GB", 40 * _GiB, 1555e9, 312e12, "NVLink 3", 300e9,
            PCIE_EFFICIENCY * _PCIE4_X16,
            _A100 + "40GB HBM2 at 1,555 GB/s, NVLink 600 GB/s (bidirectional), PCIe Gen4 64 GB/s",
            measured="Vidur's A100-80GB profiles (same SMs and NVLink 3)"),
    GPUSpec("a100-80gb", "A100 SXM 80GB", 80 * _GiB, 2039e9, 312e12, "NVLink 3", 300e9,
            PCIE_EFFICIENCY * _PCIE4_X16,
            _A100 + "80GB HBM2e at 2,039 GB/s, NVLink 600 GB/s (bidirectional), PCIe Gen4 64 GB/s"),
    GPUSpec("h100-sxm", "H100 SXM 80GB", 80 * _GiB, 3.35e12, 989.5e12, "NVLink 4", 450e9,
            PCIE_EFFICIENCY * _PCIE5_X16,
            "NVIDIA H100 Tensor Core GPU datasheet (2023), H100 SXM: FP16/BF16 Tensor Core 1,979 TFLOPS with "
            "sparsity (989.5 dense), 80GB HBM3 at 3.35 TB/s, NVLink 900 GB/s (bidirectional), PCIe Gen5 128 GB/s",
            **H100_MEASURED, measured="Vidur's H100 profiles"),
    GPUSpec("h200", "H200 SXM 141GB", 141 * _GiB, 4.8e12, 989.5e12, "NVLink 4", 450e9,
            PCIE_EFFICIENCY * _PCIE5_X16,
            "NVIDIA H200 Tensor Core GPU datasheet (2024), H200 SXM: FP16/BF16 Tensor Core 1,979 TFLOPS with "
            "sparsity (989.5 dense), 141GB HBM3e at 4.8 TB/s, NVLink 900 GB/s (bidirectional), PCIe Gen5 128 GB/s",
            **H100_MEASURED, measured="Vidur's H100 profiles (same chip and NVLink 4; HBM3e at the H100's fraction)"),
    GPUSpec("l4", "L4 24GB", 24 * _GiB, 300e9, 121e12, "PCIe 4.0 x16", _PCIE4_X16,
            PCIE_EFFICIENCY * _PCIE4_X16,
            "NVIDIA L4 Tensor Core GPU datasheet (2023): FP16/BF16 Tensor Core 242 TFLOPS with sparsity "
            "(121 dense), 24GB GDDR6 at 300 GB/s, no NVLink: PCIe Gen4 x16 64 GB/s (bidirectional)",
            allreduce=tuple((w, a, b / 300e9 * _PCIE4_X16) for w, a, b in A100_MEASURED["allreduce"]),
            measured=UNMEASURED_NOTE),
)}


def get_gpu(name: str) -> GPUSpec:
    """The :class:`GPUSpec` called ``name`` (case-insensitive; one of :data:`GPUS`).

    Raises:
        ValueError: for an unknown name or one that is not a string, listing the known ones.
    """
    key = name.strip().lower() if isinstance(name, str) else None
    if key not in GPUS:
        raise ValueError(f"unknown GPU {name!r}; choose one of {sorted(GPUS)}")
    return GPUS[key]
