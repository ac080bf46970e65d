"""The bucketed CPU decode attention (gathered blocks, one SDPA per length bucket) against the fp32 reference (§4.1).

Cases come from ``support.make_case``: every slot a sequence does not own is NaN, so a stray read
fails the test. Lengths sit inside, at and across block boundaries; buckets are forced to one per
length (``max_padding=0``), the default, and one for all; chunks are forced small.
"""

from __future__ import annotations

import pytest
import torch
from support import BF16, CONTEXT_LENS, FP16, FP32, assert_close, make_case

from paged.kernels import paged_attention_reference
from paged.kernels.bucketed import GatherWorkspace, paged_attention_bucketed, plan_buckets

CASES = [(16, 32, (8, 2), FP32), (1, 64, (4, 4), FP32), (8, 80, (5, 1), FP32), (32, 128, (28, 4), FP32),
         (16, 64, (8, 2), FP16), (16, 32, (8, 2), BF16)]
LENGTHS = [CONTEXT_LENS, (140,) * 5, (17, 16, 33, 32, 1000, 999)]


@pytest.mark.parametrize("block_size, head_size, heads, dtype", CASES)
@pytest.mark.parametrize("lens", LENGTHS)
@pytest.mark.parametrize("max_padding, max_chunk_slots", [(0, 16384), (256, 16384), (10**6, 10**6), (256, 64)])
def test_bucketed_matches_reference(block_size, head_size, heads, dtype, lens, max_padding, max_chunk_slots):
    query, key_cache, value_cache, tables, context = make_case(lens, block_size, head_size, *heads, dtype, device="cpu")
    scale = head_size ** -0.5
    ref = paged_attention_reference(query.float(), key_cache.float(), value_cache.float(), tables, context, scale)
    plan = plan_buckets(tables, context.tolist(), block_size, max_padding=max_padding, max_chunk_slots=max_chunk_slots)
    for workspace in (None, GatherWorkspace()):
        assert_close(paged_attention_bucketed(query, key_cache, value_cache, plan, scale, workspace), ref, dtype)


def test_uniform_lengths_make_one_call_in_batch_order():
    case = make_case((140,) * 4, 16, 32, 8, 2, FP32, device="cpu")
    plan = plan_buckets(case[3], case[4].tolist(), 16)
    assert len(plan.chunks) == 1 and plan.chunks[0].rows is None and plan.chunks[0].mask is None


def test_empty_batch():
    plan = plan_buckets(torch.zeros(0, 2, dtype=torch.int32), [], 16)
    out = paged_attention_bucketed(torch.zeros(0, 8, 32), torch.zeros(4, 16, 2, 32), torch.zeros(4, 16, 2, 32), plan, 0.1)
    assert out.shape == (0, 8, 32)
