"""The one registry of the serving systems the paper compares, and the KV cache manager factory (§6.1).

Every driver, the simulator, the engine and the benchmarks name systems from :data:`SYSTEMS` and
build their KV cache manager with :func:`make_kv_manager`, so a system means the same thing in
every figure:

* ``paged``: vLLM — blocks allocated on demand, shared by forks and prefixes (§4);
* ``orca-oracle`` / ``orca-pow2`` / ``orca-max``: Orca — the same iteration-level scheduler over
  one contiguous reservation per sequence from a buddy allocator, sized by a reservation policy
  (:mod:`paged.contiguous.reservation`);
* ``fastertransformer``: request-level (static) batching with maximum-length reservations (§6.1);
  it has no KV cache manager of its own (:mod:`paged.sim.static_batching`);
* ``hf-generate`` / ``hf-generate-batch``: the real engine's Hugging Face baselines (not in the
  paper): ``model.generate`` in static batches, and transformers' own continuous batching.

This module sits above :mod:`paged.block` and :mod:`paged.contiguous` and below the executors
(:mod:`paged.sim`, :mod:`paged.engine`), which is why it is not in :mod:`paged.core`.
"""

from __future__ import annotations

from dataclasses import dataclass

from paged.block.manager import PagedKVCacheManager
from paged.contiguous.manager import ContiguousKVCacheManager
from paged.core.kv_cache_manager import KVCacheManager

__all__ = ["System", "SYSTEMS", "PAPER_SYSTEMS", "FIG2_SYSTEMS", "get_system", "system_names", "make_kv_manager"]


@dataclass(frozen=True, slots=True)
class System:
    """One serving system.

    Attributes:
        name: registry key, e.g. ``"orca-pow2"``.
        label: the paper's name for it, e.g. ``"Orca (Pow2)"``.
        kv_cache: ``"paged"`` (blocks on demand) or ``"contiguous"`` (one reservation per sequence).
        reservation: the contiguous reservation policy (``"max"``, ``"pow2"``, ``"oracle"``), else None.
        batching: ``"iteration"`` (iteration-level scheduling, §4.5 / Orca) or ``"request"``
            (static batches run to completion).
        paged_kernel: the attention kernel reads K/V through block tables (§5).
        executors: where it runs: ``"sim"`` (the simulator) and/or ``"engine"`` (the real model).
    """

    name: str
    label: str
    kv_cache: str
    reservation: str | None
    batching: str
    paged_kernel: bool
    executors: tuple[str, ...]

    @property
    def has_kv_cache_manager(self) -> bool:
        """True if the scheduler drives it through a :class:`~paged.core.KVCacheManager`."""
        return self.batching == "iteration" and not self.name.startswith("hf-")


SYSTEMS: dict[str, System] = {
    s.name: s for s in (
        System("paged", "vLLM (paged)", "paged", None, "iteration", True, ("sim", "engine")),
        System("orca-oracle", "Orca (Oracle)", "contiguous", "oracle", "iteration", False, ("sim", "engine")),
        System("orca-pow2", "Orca (Pow2)", "contiguous", "pow2", "iteration", False, ("sim", "engine")),
        System("orca-max", "Orca (Max)", "contiguous", "max", "iteration", False, ("sim", "engine")),
        System("fastertransformer", "FasterTransformer", "contiguous", "max", "request", False, ("sim",)),
        System("hf-generate", "HF generate (static batches)", "contiguous", None, "request", False, ("engine",)),
        System("hf-generate-batch", "HF generate_batch (continuous)", "paged", None, "iteration", False, ("engine",)),
    )
}

#: The systems of the paper's throughput figures (Fig. 12), in the paper's legend order.
PAPER_SYSTEMS = ("paged", "orca-oracle", "orca-pow2", "orca-max", "fastertransformer")
#: The systems of Fig. 2 (memory breakdown), in the paper's order.
FIG2_SYSTEMS = ("orca-max", "orca-pow2", "orca-oracle", "paged")


def get_system(name: str) -> System:
    """The :class:`System` called ``name``.

    Raises:
        ValueError: for an unknown name, listing the known ones.
    """
    try:
        return SYSTEMS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown system {name!r}; choose one of {list(SYSTEMS)}") from None


def system_names(*, executor: str | None = None, manager: bool | None = None) -> tuple[str, ...]:
    """Names of the systems that run on ``executor`` (``"sim"`` / ``"engine"``) and, if ``manager``
    is given, that do (True) or do not (False) have a KV cache manager; registry order."""
    return tuple(s.name for s in SYSTEMS.values()
                 if (executor is None or executor in s.executors)
                 and (manager is None or s.has_kv_cache_manager == manager))


def make_kv_manager(system: str, num_blocks: int, block_size: int, *, max_seq_len: int = 2048,
                    num_cpu_blocks: int = 0, watermark: float = 0.01, contiguous_block_size: int = 1,
                    enable_prefix_caching: bool = False, classes: tuple[type, type] | None = None) -> KVCacheManager:
    """A fresh KV cache manager for ``system`` over ``num_blocks`` blocks of ``block_size`` tokens.

    Args:
        system: a name from :data:`SYSTEMS` with a KV cache manager (paged or Orca).
        num_blocks: KV cache capacity (blocks of ``block_size`` tokens): the paged manager's blocks; a
            contiguous manager gets their slots rounded down to whole ``contiguous_block_size`` blocks.
        block_size: tokens per block (tokens).
        max_seq_len: the model's maximum sequence length (tokens), Orca (Max)'s reservation.
        num_cpu_blocks: paged only: CPU swap space (blocks, §4.5); 0 disables swapping.
        watermark: paged only: fraction of blocks kept free when admitting new requests.
        contiguous_block_size: Orca only: reservations are whole blocks of this many slots. The paper's
            Orca reserves single slots (1, the simulator's); the real engine passes its kernel's block
            size, so that it reads a reservation as consecutive blocks.
        enable_prefix_caching: paged only: automatic prefix caching (:mod:`paged.block.prefix_caching`);
            a contiguous system cannot share, so asking for it there is an error.
        classes: ``(paged class, contiguous class)`` to build, subclasses of
            :class:`~paged.block.PagedKVCacheManager` and :class:`~paged.contiguous.ContiguousKVCacheManager`
            (the simulator's fast path, :mod:`paged.sim.fast`); None: those two.

    Raises:
        ValueError: for an unknown system, one without a KV cache manager, bad sizes, or prefix caching
            asked of a contiguous system.
    """
    spec = get_system(system)
    paged_class, contiguous_class = classes or (PagedKVCacheManager, ContiguousKVCacheManager)
    if not spec.has_kv_cache_manager:
        raise ValueError(f"system {system!r} ({spec.label}) has no KV cache manager: it batches whole requests")
    if spec.kv_cache == "paged":
        return paged_class(num_blocks, block_size, num_cpu_blocks=num_cpu_blocks, watermark=watermark,
                           enable_prefix_caching=enable_prefix_caching)
    if enable_prefix_caching:
        raise ValueError(f"system {system!r} ({spec.label}) keeps one contiguous reservation per sequence: it "
                         "cannot share blocks, so it has no prefix caching")
    slots = num_blocks * block_size // contiguous_block_size * contiguous_block_size
    return contiguous_class(slots, spec.reservation, max_seq_len=max_seq_len, block_size=contiguous_block_size)
