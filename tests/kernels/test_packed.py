"""The engine's padding-free CPU decode attention against the fp32 reference (§4.1).

Cases come from ``test_kernels.make_case``: every slot a sequence does not own (the tail of its
last block, block-table padding, the rest of the pool) is NaN, so a stray read fails the test.
Tolerances as in ``test_kernels``.
"""

from __future__ import annotations

import pytest
import torch
from support import CONTEXT_LENS, FP16, FP32, assert_close, make_case

from paged.kernels import paged_attention_reference
from paged.kernels.packed import pack_block_tables, paged_attention_packed

# (block_size, head_size, (num_heads, num_kv_heads), dtype); head size 32 with 8 / 2 heads is the shipped model's.
CASES = [(16, 32, (8, 2), FP32), (1, 64, (4, 4), FP32), (8, 80, (5, 1), FP32), (32, 128, (28, 4), FP32),
         (16, 64, (8, 2), FP16)]


@pytest.mark.parametrize("block_size, head_size, heads, dtype", CASES)
def test_packed_matches_reference(block_size, head_size, heads, dtype):
    query, key_cache, value_cache, tables, lens = make_case(CONTEXT_LENS, block_size, head_size, *heads, dtype,
                                                            device="cpu")
    scale = head_size ** -0.5
    ref = paged_attention_reference(query.float(), key_cache.float(), value_cache.float(), tables, lens, scale)
    packed = pack_block_tables(tables, lens, block_size)
    assert_close(paged_attention_packed(query, key_cache, value_cache, packed, scale), ref, dtype)


def test_full_blocks_and_batch_of_one():
    case = make_case((32, 16, 48), 16, 32, 8, 2, FP32, device="cpu")
    packed = pack_block_tables(case[3], case[4], 16)
    assert packed.empty_slots.numel() == 0 and not packed.score_bias.isinf().any()
    assert_close(paged_attention_packed(*case[:3], packed, 0.2), paged_attention_reference(*case, 0.2), FP32)
    one = (case[0][:1], case[1], case[2], case[3][:1], case[4][:1])
    packed = pack_block_tables(one[3], one[4], 16)
    assert_close(paged_attention_packed(*one[:3], packed, 0.2), paged_attention_reference(*one, 0.2), FP32)


def test_pack_block_tables_layout():
    tables = torch.tensor([[7, 3, 9], [5, 99, 99], [2, 4, 99]], dtype=torch.int32)
    packed = pack_block_tables(tables, torch.tensor([9, 1, 8]), 4)
    assert packed.num_seqs == 3
    assert packed.block_ids.tolist() == [7, 3, 9, 5, 2, 4]
    assert packed.block_seq.tolist() == [0, 0, 0, 1, 2, 2]
    # Seq 0 holds 1 token of its 3rd block (slots 9-11 of the 24 gathered are empty), seq 1 one token
    # of its only block (13-15), seq 2 fills both blocks.
    assert packed.empty_slots.tolist() == [9, 10, 11, 13, 14, 15]
    assert packed.score_bias.shape == (6, 1, 1, 4)


def test_empty_batch():
    packed = pack_block_tables(torch.zeros(0, 2, dtype=torch.int32), torch.zeros(0, dtype=torch.int32), 16)
    out = paged_attention_packed(torch.zeros(0, 8, 32), torch.zeros(4, 16, 2, 32), torch.zeros(4, 16, 2, 32),
                                 packed, 0.1)
    assert out.shape == (0, 8, 32)


def test_fp16_large_scores_do_not_overflow():
    """Unscaled q·k above fp16's 65504 made the old half-precision path return NaN; the softmax is
    taken in fp32 on scaled queries now."""
    query, key_cache, value_cache, tables, lens = make_case((20, 37), 16, 64, 4, 2, FP16, device="cpu")
    query = query.abs() * 0 + 40.0  # q·k = 64 × 40 × 40 = 102400 > 65504 for a key of all 40s
    for cache in (key_cache, value_cache):
        cache.copy_(torch.where(cache.isnan(), cache, torch.full_like(cache, 40.0)))
    scale = 64 ** -0.5
    ref = paged_attention_reference(query.float(), key_cache.float(), value_cache.float(), tables, lens, scale)
    out = paged_attention_packed(query, key_cache, value_cache, pack_block_tables(tables, lens, 16), scale)
    assert_close(out, ref, FP16)
