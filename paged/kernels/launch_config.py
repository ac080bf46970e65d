"""Launch parameters of the Triton paged-attention kernels, per shape (paper §4.1, §5.1).

A :class:`LaunchConfig` is everything the launcher chooses that changes the compiled kernel but
not its result: tokens per loop step (``tile``), ``num_warps``, ``num_stages`` (software
pipelining depth) and how a group of query heads meets its keys (``padded_dot``: ``tl.dot`` with
the group padded to 16 rows, or an elementwise product and reduction).

:func:`decode_config` is the one table the launcher reads. It is justified by the ahead-of-time
compile check (:mod:`paged.kernels.compile_check`, run by ``make test`` for sm_80 and sm_90, fp16,
bf16 and fp32): every entry compiles with **no stack** (nothing spilled to local memory), at most
:data:`MAX_REGISTERS` registers per thread and at least :data:`MIN_WARPS_PER_SM` resident warps.
How the table follows from what a program holds:

* a key tile and a value tile live in registers, so ``tile × head_pad`` is the register cost
  (:data:`TILE_VALUES_DOT`, :data:`WARP4_VALUES` bound it and pick 4 or 8 warps);
* ``num_stages`` is 3 (Triton's default) for ``tl.dot``, 2 for rows of 128 values on sm_90 where 3
  stages spill; the elementwise path does not pipeline (2 stages);
* a group of one (no GQA) takes the elementwise path, larger groups ``tl.dot``
  (:data:`ELEMENTWISE_MAX_GROUP` says why);
* the launcher refuses unaligned K/V, and the kernel does not specialise on the integers that change
  from call to call, so the one compiled variant the check verified serves every batch.

The registers and spills the check measured for each choice are in docs/benchmarks.md.

On a GPU, ``make gpu-check`` with ``--autotune`` (:mod:`paged.kernels.autotune`) times the
neighbours of an entry (:func:`candidate_configs`) and caches the fastest that does not spill in a
JSON file; :func:`use_tuned_configs` makes :func:`decode_config` prefer those entries in one
process. Nothing installs them by default, and the tests never do.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["LaunchConfig", "DEFAULT_PARTITION_SIZE", "MAX_REGISTERS", "MIN_WARPS_PER_SM", "ELEMENTWISE_MAX_GROUP",
           "REDUCE_CONFIG", "REDUCE_CHUNK", "TILE_VALUES_DOT", "WARP4_VALUES", "decode_config", "candidate_configs",
           "next_pow2", "tuned_key", "use_tuned_configs", "use_split_k"]

#: Tokens per split-K partition (a multiple of every tile size of the table).
DEFAULT_PARTITION_SIZE = 512
#: Registers per thread the compile check allows (ptxas' own ceiling is 255). With 4 warps per
#: program, 128 registers let 4 programs (16 warps, 25% of the 64 warp slots) share one SM's
#: 65,536 registers on sm_80 and sm_90; with 8-16 KiB of keys and values per tile in flight per
#: program, 4 programs per SM keep 32+ KiB of loads in flight, more than HBM latency × bandwidth
#: per SM (about 1 µs × 3.35 TB/s ÷ 132 SMs ≈ 25 KB on an H100).
MAX_REGISTERS = 128
#: Resident warps per SM the compile check requires of every launch (25% of 64): registers ≤
#: MAX_REGISTERS alone guarantee it, shared memory must not take it below.
MIN_WARPS_PER_SM = 16
#: Largest query group served by the elementwise path (larger groups use ``tl.dot``). A group of one
#: (no GQA, e.g. OPT-13B's 40 heads over 40 KV heads) reads the same key/value bytes either way (the
#: padded dot's padded query rows are masked, never loaded); elementwise it does 1/16 of the padded
#: dot's multiply-adds and stages no K/V in shared memory for the MMA. The padded dot's 15 wasted rows
#: cost tensor-core issue only, about 16 flop per byte read, below every GPU's ridge, so neither path
#: is compute bound and the choice rests on resources. Larger groups stay on ``tl.dot``: a group's
#: elementwise product is a ``[group, tile, head]`` fp32 tensor in registers, which outgrows
#: :data:`MAX_REGISTERS` from group 4 on (docs/benchmarks.md).
ELEMENTWISE_MAX_GROUP = 1
#: 16-bit values of one key tile (``tile × head_pad``) the ``tl.dot`` path aims for, and the most a
#: tile may hold with 4 warps (more take 8 warps; the elementwise path stays at 4 warps and this size).
#: A key tile and a value tile live in registers, so ``tile × head_pad`` is the register cost: tile
#: 64 up to head 128, 32 at head 256 (half for fp32).
TILE_VALUES_DOT = 8192
WARP4_VALUES = 4096
#: Partitions the split-K reduce kernel merges per loop step.
REDUCE_CHUNK = 16


@dataclass(frozen=True)
class LaunchConfig:
    """One kernel launch's compile-time parameters.

    Attributes:
        tile: tokens of keys/values per loop step (power of two ≥ 16 with ``padded_dot``, ≥ 8 otherwise).
        num_warps: warps per program (power of two).
        num_stages: software-pipelining stages of the token loop (≥ 1).
        padded_dot: ``tl.dot`` with the query group padded to 16 rows (True) or the elementwise
            product (False; groups ≤ :data:`ELEMENTWISE_MAX_GROUP`).
    """

    tile: int
    num_warps: int
    num_stages: int
    padded_dot: bool = True

    def as_dict(self) -> dict:
        """The fields as a plain dict (for JSON and CSV)."""
        return asdict(self)


#: The split-K reduce kernel: one program per (sequence, query head) merging [REDUCE_CHUNK, head] fp32
#: partial results per step; it is tiny (at most 2 × 16 × 256 / 128 = 64 fp32 values per thread).
REDUCE_CONFIG = LaunchConfig(tile=REDUCE_CHUNK, num_warps=4, num_stages=1, padded_dot=False)


def next_pow2(n: int) -> int:
    """The smallest power of two ≥ ``n`` (1 for ``n ≤ 1``)."""
    return 1 << (max(n, 1) - 1).bit_length()


#: Autotuned entries installed by :func:`use_tuned_configs` (empty unless a caller installs some).
_TUNED: dict[str, LaunchConfig] = {}


def tuned_key(capability: int, head_size: int, queries_per_kv: int, element_size: int) -> str:
    """The key of a tuned entry: one compiled kernel serves every group > 1 of a head size."""
    path = "dot" if queries_per_kv > ELEMENTWISE_MAX_GROUP else "elementwise"
    return f"sm_{capability}/head_{head_size}/{path}/{element_size}B"


def use_tuned_configs(path: str | Path | None) -> dict[str, LaunchConfig]:
    """Make :func:`decode_config` prefer the autotuned entries in ``path`` (None: forget them).

    Returns:
        the installed entries by :func:`tuned_key`.

    Raises:
        OSError: the file cannot be read. ValueError: it is not an autotune result (names the file).
    """
    _TUNED.clear()
    if path is None:
        return {}
    try:
        entries = json.loads(Path(path).read_text())["entries"]
        tuned = {e["key"]: LaunchConfig(**e["best"]) for e in entries if e.get("best")}
    except (KeyError, TypeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} is not an autotune result of paged.kernels.autotune ({err!r})") from None
    _TUNED.update(tuned)
    return dict(_TUNED)


def decode_config(head_size: int, queries_per_kv: int, element_size: int, capability: int = 80) -> LaunchConfig:
    """The decode kernel's launch parameters for one attention shape (the table above).

    Args:
        head_size: channels per head (padded to a power of two inside the kernel).
        queries_per_kv: query heads per KV head (1 without GQA).
        element_size: bytes per cache element (2 for fp16/bf16, 4 for fp32).
        capability: the GPU's compute capability as ``10 * major + minor`` (80 = A100, 90 = H100);
            ≥ 90 takes the sm_90 column. The compile check verifies 80 and 90 only.

    Returns:
        the :class:`LaunchConfig` the launcher uses (an entry installed by :func:`use_tuned_configs`
        first). Block size does not enter: a tile gathers tokens from as many blocks as it spans.
    """
    if _TUNED and (tuned := _TUNED.get(tuned_key(capability, head_size, queries_per_kv, element_size))):
        return tuned
    values = next_pow2(head_size) * element_size // 2  # one key row, in 16-bit values
    if queries_per_kv > ELEMENTWISE_MAX_GROUP:  # tl.dot: a tile's keys and values staged for the MMA
        tile = min(64, max(16, TILE_VALUES_DOT // values))
        # sm_90's ptxas spilled with 3 stages at 128-value rows with split-K (docs/benchmarks.md)
        stages = 2 if capability >= 90 and values == 128 else 3
        return LaunchConfig(tile, num_warps=4 if tile * values <= WARP4_VALUES else 8, num_stages=stages)
    # elementwise: a [tile, head] fp32 product per tile; ≤ 32 tokens (64 reached 128 registers with split-K)
    tile = min(32, max(8, WARP4_VALUES // values))
    return LaunchConfig(tile, num_warps=4, num_stages=2, padded_dot=False)


def candidate_configs(head_size: int, queries_per_kv: int, element_size: int, capability: int = 80) -> list[LaunchConfig]:
    """The table's entry and its neighbours (tile ÷2 / ×2, 2 or 8 warps, 1-3 stages), for autotuning.

    Only meant for timing on a real GPU (:mod:`paged.bench.gpu_check`); a neighbour may use more
    registers than :data:`MAX_REGISTERS`, so the tuner rejects any that the device reports spilling.
    """
    base = decode_config(head_size, queries_per_kv, element_size, capability)
    low = 16 if base.padded_dot else 8
    tiles = sorted({t for t in (base.tile // 2, base.tile, base.tile * 2) if low <= t <= 128})
    configs = [LaunchConfig(t, w, s, base.padded_dot) for t in tiles for w in (2, 4, 8) for s in (1, 2, 3)]
    return [base] + [c for c in configs if c != base]


def use_split_k(num_seqs: int, num_kv_heads: int, max_context_len: int, num_sms: int,
                partition_size: int = DEFAULT_PARTITION_SIZE) -> bool:
    """The rule that picks the split-K (flash-decoding) path.

    Split-K is used when a sequence can span more than one partition
    (``max_context_len > partition_size``) **and** the single-pass grid of
    ``num_seqs * num_kv_heads`` programs is smaller than the number of streaming multiprocessors
    (``num_sms``), i.e. the single pass would leave SMs idle while a few programs walk long
    contexts. Otherwise one pass is cheaper: it skips the partial-result round trip through memory
    and the reduce launch.

    Args:
        num_seqs: sequences in the batch.
        num_kv_heads: KV heads (one program per KV head and sequence).
        max_context_len: an upper bound of the context lengths (tokens); the launcher passes
            ``max_blocks_per_seq * block_size`` so that choosing needs no device→host copy.
        num_sms: streaming multiprocessors of the device (e.g. 132 on an H100/H200, 108 on an A100).
        partition_size: tokens per partition.
    """
    return max_context_len > partition_size and num_seqs * num_kv_heads < num_sms
