"""Launch parameters of the Triton paged-attention kernels, per shape (paper §4.1, §5.1).

A :class:`LaunchConfig` is everything the launcher chooses that changes the compiled kernel but
not its result: tokens per loop step (``tile``), ``num_warps``, ``num_stages`` (software
pipelining depth) and how a group of query heads meets its keys (``padded_dot``: ``tl.dot`` with
the group padded to 16 rows, or an elementwise product and reduction).

:func:`decode_config` is the one table the launcher reads. It is justified by the ahead-of-time
compile check (:mod:`paged.kernels.compile_check`, run by ``make test`` for sm_80 and sm_90):
every entry compiles with **no stack** (nothing spilled to local memory) and at most
:data:`MAX_REGISTERS` registers per thread. The check's measurements (fp16, block size 16, sm_80,
Triton 3.9) that chose it:

* ``tile`` is the main register cost: a ``[tile, head]`` key tile and value tile live in registers
  (``tile × head_pad × 2 tiles / threads`` values per thread). 64 tokens × head 128 with 4 warps
  takes about 100-120 registers; head 256 needs tile 32 for the same budget.
* ``num_warps=4`` (Triton's default): 8 warps halve the values per thread but only lower registers
  at head 256, and leave fewer, larger programs per SM.
* ``num_stages``: the token loop's loads go through the block table (a gather), so deeper
  pipelining buys little and costs shared memory per program; 2 stages keep shared memory ≤ 32 KiB
  at tile 64 × head 128 and registers below the limit.
* ``padded_dot=False`` for a group of one query head (models without GQA, e.g. OPT-13B's 40 heads
  over 40 KV heads): the elementwise path reads exactly the same key/value bytes (the padded query
  rows are masked, never loaded), needs no shared memory for ``tl.dot``'s operand layouts, and
  does 1/16 of the padded dot's multiply-adds. Groups of 2 and more use ``tl.dot``: the elementwise
  product of a group is a ``[group, tile, head]`` tensor in registers, which spills for groups ≥ 4
  at useful tiles (see :data:`ELEMENTWISE_MAX_GROUP`).

On a GPU, ``make gpu-check`` with ``--autotune`` (:mod:`paged.kernels.autotune`) times the
neighbours of an entry (:func:`candidate_configs`) and caches the fastest that does not spill in a
JSON file; :func:`use_tuned_configs` makes :func:`decode_config` prefer those entries in one
process. Nothing installs them by default, and the tests never do.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["LaunchConfig", "MAX_REGISTERS", "MIN_WARPS_PER_SM", "ELEMENTWISE_MAX_GROUP", "REDUCE_CONFIG", "REDUCE_CHUNK",
           "decode_config", "candidate_configs", "next_pow2", "tuned_key", "use_tuned_configs"]

#: Registers per thread the compile check allows (ptxas' own ceiling is 255). With 4 warps per
#: program, 128 registers let 4 programs (16 warps, 25% of the 64 warp slots) share one SM's
#: 65,536 registers on sm_80 and sm_90; each decode program keeps 16+ KiB of keys and values in
#: flight, so 4 programs per SM are enough to cover HBM latency (see the compile check's table).
MAX_REGISTERS = 128
#: Resident warps per SM the compile check requires of every launch (25% of 64): registers ≤
#: MAX_REGISTERS alone guarantee it, shared memory must not take it below.
MIN_WARPS_PER_SM = 16
#: Largest query group served by the elementwise path (larger groups use ``tl.dot``).
ELEMENTWISE_MAX_GROUP = 1
#: 16-bit values of one key tile (``tile × head_pad``) the ``tl.dot`` path aims for, and the most a
#: tile may hold with 4 warps (more take 8 warps; the elementwise path stays at 4 warps and this size).
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
        stages = 2 if capability >= 90 and values == 128 else 3  # the one place 3 stages spilled on sm_90
        return LaunchConfig(tile, num_warps=4 if tile * values <= WARP4_VALUES else 8, num_stages=stages)
    tile = min(64, max(8, WARP4_VALUES // values))  # elementwise: a [tile, head] fp32 product per tile
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
