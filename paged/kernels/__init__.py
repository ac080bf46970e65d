"""Attention kernels over the paged KV cache (paper §4.1, §5.1).

* :mod:`paged.kernels.reference`: torch references (importing needs only torch): the fp32
  oracle, the block-table gather, and the contiguous-cache baseline of Fig. 18a.
* :mod:`paged.kernels.paged_attention`: the Triton decode kernel (imports ``triton``; set
  ``TRITON_INTERPRET=1`` before importing it to run on CPU tensors). It is not imported here, so
  ``import paged.kernels`` works without triton.

Call :func:`paged.attention.paged_attention` rather than these directly: it checks inputs.
"""

from __future__ import annotations

from paged.kernels.reference import (
    contiguous_attention,
    gather_kv,
    paged_attention_reference,
    paged_attention_torch,
)

__all__ = ["contiguous_attention", "gather_kv", "paged_attention_reference", "paged_attention_torch"]
