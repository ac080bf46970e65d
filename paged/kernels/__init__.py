"""Attention kernels over the paged KV cache (paper §4.1, §5.1).

* :mod:`~paged.kernels.attention`: :func:`paged_attention`, the dispatcher: checks its inputs, then
  runs the Triton kernel on CUDA tensors or the torch reference elsewhere;
* :mod:`~paged.kernels.triton_paged_attention`: the Triton decode kernel and its launcher (imports
  ``triton``; set ``TRITON_INTERPRET=1`` before importing it to run on CPU tensors). It is not
  imported here, so ``import paged.kernels`` works without triton;
* :mod:`~paged.kernels.launch_config`: the kernel's launch parameters per shape (tile, warps,
  stages, group path) and the split-K rule; :mod:`~paged.kernels.compile_check`: its ahead-of-time
  compile for sm_80/sm_90 and resource check (no GPU needed); :mod:`~paged.kernels.autotune`:
  optional timing of the table's neighbours on a real GPU;
* :mod:`~paged.kernels.reference`: torch references: the fp32 oracle, the block-table gather, and
  the contiguous-cache baseline of Fig. 18a;
* :mod:`~paged.kernels.packed`: a padding-free CPU decode path;
* :mod:`~paged.kernels.cpu_kernel`: the engine's CPU decode kernel, C (``paged_attention_cpu.c``,
  package data) compiled on first use and called through ctypes; it reads keys and values through
  the block tables without a gather;
* :mod:`~paged.kernels.bucketed`: the CPU decode path by length buckets (gathered blocks, one SDPA
  call per bucket), the engine's when the C kernel is not available.

The kernels know nothing of blocks allocators or schedulers: they read a cache through block
tables, so they import only torch (and triton, and the standard library's ctypes).
"""

from __future__ import annotations

from paged.kernels.attention import SUPPORTED_BLOCK_SIZES, SUPPORTED_DTYPES, SUPPORTED_HEAD_SIZES, paged_attention
from paged.kernels.reference import (
    contiguous_attention,
    gather_kv,
    paged_attention_reference,
    paged_attention_torch,
)

__all__ = ["SUPPORTED_BLOCK_SIZES", "SUPPORTED_DTYPES", "SUPPORTED_HEAD_SIZES", "contiguous_attention", "gather_kv",
           "paged_attention", "paged_attention_reference", "paged_attention_torch"]
