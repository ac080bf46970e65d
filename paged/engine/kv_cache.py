"""The KV cache tensors: blocks of token slots per layer, written by slot mapping (paper §4.1–§4.5, §5.1).

Each layer has a key and a value tensor ``[num_blocks, block_size, num_kv_heads, head_size]``.
Physical block ``b`` holds slots ``b * block_size .. b * block_size + block_size - 1``; a
:class:`~paged.BlockTable` says which blocks a sequence uses and its ``slot_mapping`` says where
each new token's key and value go (:meth:`PagedKVCache.write`).

All layers live in one tensor ``[2, num_layers, num_blocks, block_size, num_kv_heads, head_size]``
(index 0 keys, 1 values); ``key_caches[layer]`` and ``value_caches[layer]`` are views of it. So
the block copies of one step (copy-on-write, §4.4) are one gather and one scatter for every layer
at once (:meth:`PagedKVCache.copy_blocks`, the paper's fused block copy, §5.1), and swapping moves
a set of blocks of every layer in one transfer (:meth:`swap_out` / :meth:`swap_in`, §4.5).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from paged.core.checks import as_positive_int

__all__ = ["PagedKVCache"]


class PagedKVCache:
    """Paged key/value tensors for every layer, plus an optional CPU swap space.

    Args:
        num_layers: transformer layers (≥ 1).
        num_blocks: physical blocks on ``device`` (blocks, ≥ 1).
        block_size: token slots per block (tokens, ≥ 1).
        num_kv_heads: key/value heads (≥ 1).
        head_size: channels per head (≥ 1).
        dtype: element type, e.g. ``torch.float16``.
        device: where the cache lives (``"cuda"`` on a GPU, ``"cpu"`` otherwise).
        num_cpu_blocks: blocks of CPU swap space (blocks, ≥ 0); pinned memory when ``device`` is CUDA.
        memory_budget_bytes: if given, the device tensors must fit in it (bytes).

    Attributes:
        key_caches, value_caches: per layer ``[num_blocks, block_size, num_kv_heads, head_size]``.
        cpu_key_caches, cpu_value_caches: the same on the CPU with ``num_cpu_blocks`` blocks.

    Raises:
        ValueError: on a non-positive size, or if the tensors exceed ``memory_budget_bytes``.

    The tensors start zeroed (allocation is O(cache size)).
    """

    __slots__ = ("num_layers", "num_blocks", "block_size", "num_kv_heads", "head_size", "dtype",
                 "device", "num_cpu_blocks", "_kv", "_cpu_kv", "key_caches", "value_caches",
                 "cpu_key_caches", "cpu_value_caches", "_key_slots", "_value_slots")

    def __init__(self, num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int,
                 head_size: int, dtype: torch.dtype = torch.float16, device: str | torch.device = "cpu",
                 *, num_cpu_blocks: int = 0, memory_budget_bytes: int | None = None) -> None:
        num_layers, num_blocks, block_size, num_kv_heads, head_size = (
            as_positive_int(value, name) for name, value in (("num_layers", num_layers), ("num_blocks", num_blocks),
                                                             ("block_size", block_size), ("num_kv_heads", num_kv_heads),
                                                             ("head_size", head_size)))
        if isinstance(num_cpu_blocks, bool) or not isinstance(num_cpu_blocks, int) or num_cpu_blocks < 0:
            raise ValueError(f"num_cpu_blocks must be a non-negative integer, got {num_cpu_blocks!r}")
        need = num_blocks * self.bytes_per_block(num_layers, block_size, num_kv_heads, head_size, dtype)
        if memory_budget_bytes is not None and need > memory_budget_bytes:
            raise ValueError(f"{num_blocks} blocks need {need:,} bytes of KV cache, more than the budget "
                             f"of {memory_budget_bytes:,} bytes")
        self.num_layers, self.num_blocks, self.block_size = num_layers, num_blocks, block_size
        self.num_kv_heads, self.head_size, self.dtype = num_kv_heads, head_size, dtype
        self.device = torch.device(device)
        self.num_cpu_blocks = num_cpu_blocks
        block_shape = (block_size, num_kv_heads, head_size)
        self._kv = torch.zeros((2, num_layers, num_blocks, *block_shape), dtype=dtype, device=self.device)
        self._cpu_kv = torch.zeros((2, num_layers, num_cpu_blocks, *block_shape), dtype=dtype, device="cpu",
                                   pin_memory=self.device.type == "cuda" and num_cpu_blocks > 0)
        self.key_caches = list(self._kv[0].unbind(0))
        self.value_caches = list(self._kv[1].unbind(0))
        self.cpu_key_caches = list(self._cpu_kv[0].unbind(0))
        self.cpu_value_caches = list(self._cpu_kv[1].unbind(0))
        slot_shape = (num_blocks * block_size, num_kv_heads, head_size)  # one row per token slot
        self._key_slots = [t.view(slot_shape) for t in self.key_caches]
        self._value_slots = [t.view(slot_shape) for t in self.value_caches]

    # -- sizes --------------------------------------------------------------------------
    @staticmethod
    def bytes_per_block(num_layers: int, block_size: int, num_kv_heads: int, head_size: int,
                        dtype: torch.dtype) -> int:
        """Bytes one physical block takes across all layers, keys and values (bytes)."""
        element = torch.empty((), dtype=dtype).element_size()
        return 2 * num_layers * block_size * num_kv_heads * head_size * element

    @classmethod
    def num_blocks_for_budget(cls, memory_budget_bytes: int, num_layers: int, block_size: int,
                              num_kv_heads: int, head_size: int, dtype: torch.dtype) -> int:
        """The most blocks whose tensors fit in ``memory_budget_bytes`` (blocks, floor).

        Raises:
            ValueError: if not even one block fits.
        """
        per_block = cls.bytes_per_block(num_layers, block_size, num_kv_heads, head_size, dtype)
        num_blocks = int(memory_budget_bytes) // per_block
        if num_blocks < 1:
            raise ValueError(f"a budget of {memory_budget_bytes:,} bytes holds no block of {per_block:,} bytes")
        return num_blocks

    @property
    def nbytes(self) -> int:
        """Bytes of the device key and value tensors of every layer (bytes)."""
        return self._kv.numel() * self._kv.element_size()

    @property
    def cpu_nbytes(self) -> int:
        """Bytes of the CPU swap space (bytes)."""
        return self._cpu_kv.numel() * self._cpu_kv.element_size()

    # -- writes ---------------------------------------------------------------------------
    def write(self, layer: int, slot_mapping: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
        """Store the keys and values of ``num_tokens`` new tokens of one layer (§4.1).

        Vectorized: one ``index_copy_`` per tensor, no Python loop over tokens. The checks copy
        two scalars (min, max of the slots) to the host.

        Args:
            layer: layer index in ``[0, num_layers)``.
            slot_mapping: ``[num_tokens]`` integer; slot = block × block_size + offset; ``-1`` skips
                the token (padding). Slots other than −1 must be distinct.
            key, value: ``[num_tokens, num_kv_heads, head_size]`` in the cache dtype.

        Raises:
            IndexError: if ``layer`` is out of range.
            TypeError: on a non-integer slot mapping or a dtype other than the cache's.
            ValueError: on wrong shapes, a slot outside ``[-1, num_blocks * block_size)``, or a
                repeated slot.
        """
        if not 0 <= layer < self.num_layers:
            raise IndexError(f"layer {layer} out of range [0, {self.num_layers})")
        if not isinstance(slot_mapping, torch.Tensor) or slot_mapping.dtype.is_floating_point or slot_mapping.dtype == torch.bool:
            raise TypeError("slot_mapping must be an integer torch.Tensor")
        shape = (slot_mapping.shape[0] if slot_mapping.dim() == 1 else -1, self.num_kv_heads, self.head_size)
        if slot_mapping.dim() != 1 or key.shape != shape or value.shape != shape:
            raise ValueError(f"need slot_mapping [num_tokens] and key/value [num_tokens, {self.num_kv_heads}, "
                             f"{self.head_size}]; got {tuple(slot_mapping.shape)}, {tuple(key.shape)}, {tuple(value.shape)}")
        if key.dtype != self.dtype or value.dtype != self.dtype:
            raise TypeError(f"key/value dtype ({key.dtype}, {value.dtype}) must be the cache dtype {self.dtype}")
        if slot_mapping.numel() == 0:
            return
        slots = slot_mapping.to(device=self.device, dtype=torch.int64)
        keep = self._check_range(slots)
        if keep is not None:
            slots, key, value = slots[keep], key[keep.to(key.device)], value[keep.to(value.device)]
        self._check_distinct(slots)
        self.write_checked(layer, slots, key, value)

    def check_slots(self, slot_mapping: torch.Tensor) -> torch.Tensor:
        """Validate a step's slot mapping once, for :meth:`write_checked` in every layer.

        The same checks as :meth:`write` (two scalars and a sort of the slots reach the host), done
        once per step instead of once per layer.

        Args:
            slot_mapping: ``[num_tokens]`` integer cache slots (block × block_size + offset), distinct,
                none ``-1`` (padding goes through :meth:`write`).

        Returns:
            ``[num_tokens]`` int64 on the cache's device.

        Raises:
            TypeError: a non-integer slot mapping.
            ValueError: not 1-d, a slot outside ``[0, num_blocks * block_size)`` or a repeated slot.
        """
        if not isinstance(slot_mapping, torch.Tensor) or slot_mapping.dtype.is_floating_point or slot_mapping.dtype == torch.bool:
            raise TypeError("slot_mapping must be an integer torch.Tensor")
        if slot_mapping.dim() != 1:
            raise ValueError(f"need slot_mapping [num_tokens], got {tuple(slot_mapping.shape)}")
        slots = slot_mapping.to(device=self.device, dtype=torch.int64)
        if slots.numel():
            if self._check_range(slots) is not None:
                raise ValueError("slot_mapping holds -1 (skip); write() takes padded slot mappings")
            self._check_distinct(slots)
        return slots

    def check_slot_list(self, slot_mapping: Sequence[int]) -> None:
        """:meth:`check_slots` on a Python list, before it becomes a tensor (no tensor op, nothing to sync).

        Args:
            slot_mapping: ``num_tokens`` integer cache slots (block × block_size + offset), distinct, none ``-1``.

        Raises:
            ValueError: a slot outside ``[0, num_blocks * block_size)`` (``-1`` included) or a repeated slot.

        Cost: O(num_tokens) in Python (a min, a max and a set); cheaper than the tensor checks up to
        a few thousand tokens, about 25% dearer at 8,192.
        """
        if not slot_mapping:
            return
        num_slots = self.num_blocks * self.block_size
        low, high = min(slot_mapping), max(slot_mapping)
        if low == -1:
            raise ValueError("slot_mapping holds -1 (skip); write() takes padded slot mappings")
        if low < -1 or high >= num_slots:
            raise ValueError(f"slots must be -1 (skip) or in [0, {num_slots}), got range [{low}, {high}]")
        if len(set(slot_mapping)) != len(slot_mapping):
            raise ValueError("slot_mapping repeats a slot; each token needs its own slot")

    def write_checked(self, layer: int, slots: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
        """:meth:`write` without its checks: ``slots`` from :meth:`check_slots`, ``layer`` in range.

        Args:
            layer: layer index.
            slots: ``[num_tokens]`` int64 on the cache's device.
            key, value: ``[num_tokens, num_kv_heads, head_size]`` in the cache dtype.

        Cost: one ``index_copy_`` per tensor, into ``[num_slots, num_kv_heads, head_size]`` views made once.
        """
        device = self.device
        self._key_slots[layer].index_copy_(0, slots, key.to(device))
        self._value_slots[layer].index_copy_(0, slots, value.to(device))

    def _check_range(self, slots: torch.Tensor) -> torch.Tensor | None:
        """Raise unless every slot is −1 or in range; the mask of slots to keep when some are −1."""
        num_slots = self.num_blocks * self.block_size
        low, high = int(slots.min()), int(slots.max())
        if low < -1 or high >= num_slots:
            raise ValueError(f"slots must be -1 (skip) or in [0, {num_slots}), got range [{low}, {high}]")
        return slots >= 0 if low == -1 else None

    @staticmethod
    def _check_distinct(slots: torch.Tensor) -> None:
        if torch.unique(slots).numel() != slots.numel():
            raise ValueError("slot_mapping repeats a slot; each token needs its own slot")

    # -- block moves ---------------------------------------------------------------------
    @staticmethod
    def _pairs(pairs: Iterable[Sequence[int]], num_src: int, num_dst: int, what: str,
               shared_src: bool = False) -> tuple[list[int], list[int]]:
        """Deduplicate and check ``(src, dst)`` pairs: each dst at most once, and each src at
        most once unless ``shared_src`` (one block copied to several new blocks)."""
        unique = list(dict.fromkeys((int(s), int(d)) for s, d in pairs))
        src = [s for s, _ in unique]
        dst = [d for _, d in unique]
        if (not shared_src and len(set(src)) != len(src)) or len(set(dst)) != len(dst):
            raise ValueError(f"{what}: a block appears in two different pairs: {unique}")
        for name, ids, limit in (("source", src, num_src), ("destination", dst, num_dst)):
            bad = [b for b in ids if not 0 <= b < limit]
            if bad:
                raise ValueError(f"{what}: {name} blocks {bad} outside [0, {limit})")
        return src, dst

    def copy_blocks(self, pairs: Iterable[Sequence[int]]) -> None:
        """Apply every copy-on-write copy of one step, in every layer, keys and values (§4.4, §5.1).

        One gather of all source blocks and one scatter to all destinations, over the stacked
        ``[2, num_layers, ...]`` tensor (the fused block copy of §5.1). All sources are read
        before any destination is written.

        Args:
            pairs: ``(src_block, dst_block)`` pairs, as returned by ``BlockTable.append_tokens``.
                Repeated identical pairs are applied once. One source may go to several
                destinations (several beam candidates leaving the same shared last block).

        Raises:
            ValueError: a block id out of range, or a destination in two different pairs.
        """
        src, dst = self._pairs(pairs, self.num_blocks, self.num_blocks, "copy_blocks", shared_src=True)
        if not src:
            return
        src_t = torch.tensor(src, dtype=torch.int64, device=self.device)
        dst_t = torch.tensor(dst, dtype=torch.int64, device=self.device)
        self._kv.index_copy_(2, dst_t, self._kv.index_select(2, src_t))

    def swap_out(self, block_mapping: Iterable[Sequence[int]]) -> None:
        """Copy device blocks to CPU swap blocks, every layer (preemption by swapping, §4.5).

        Args:
            block_mapping: ``(gpu_block, cpu_block)`` pairs, as returned by
                ``PagedKVCacheManager.swap_out``. The manager lists each physical block of a group
                once, so a block shared by its sequences moves once; a block that two groups
                swapped out in the same step share (a shared prefix) is copied to both groups' CPU
                blocks; an identical pair repeated is applied once, and a CPU block in two different
                pairs is an error.

        Raises:
            ValueError: a block id out of range or mapped twice differently.
        """
        gpu, cpu = self._pairs(block_mapping, self.num_blocks, self.num_cpu_blocks, "swap_out", shared_src=True)
        if gpu:
            gpu_t = torch.tensor(gpu, dtype=torch.int64, device=self.device)
            moved = self._kv.index_select(2, gpu_t).to("cpu")
            self._cpu_kv.index_copy_(2, torch.tensor(cpu, dtype=torch.int64), moved)

    def swap_in(self, block_mapping: Iterable[Sequence[int]]) -> None:
        """Copy CPU swap blocks back to device blocks, every layer (§4.5).

        Args:
            block_mapping: ``(cpu_block, gpu_block)`` pairs (source first, as returned by
                ``PagedKVCacheManager.swap_in``); each block once, as in :meth:`swap_out`.

        Raises:
            ValueError: a block id out of range or mapped twice differently.
        """
        cpu, gpu = self._pairs(block_mapping, self.num_cpu_blocks, self.num_blocks, "swap_in")
        if cpu:
            moved = self._cpu_kv.index_select(2, torch.tensor(cpu, dtype=torch.int64))
            gpu_t = torch.tensor(gpu, dtype=torch.int64, device=self.device)
            self._kv.index_copy_(2, gpu_t, moved.to(self.device, non_blocking=True))

    def __repr__(self) -> str:
        return (f"PagedKVCache(num_layers={self.num_layers}, num_blocks={self.num_blocks}, "
                f"block_size={self.block_size}, num_kv_heads={self.num_kv_heads}, head_size={self.head_size}, "
                f"dtype={self.dtype}, device={self.device}, num_cpu_blocks={self.num_cpu_blocks}, "
                f"nbytes={self.nbytes:,})")
