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


def _same_plan(a, b) -> bool:
    def same(x, y):
        return (x is None and y is None) or (x is not None and y is not None and torch.equal(x, y))
    return (a.num_seqs, a.max_chunk_blocks, len(a.chunks)) == (b.num_seqs, b.max_chunk_blocks, len(b.chunks)) and all(
        (c.num_rows, c.width, c.max_len) == (d.num_rows, d.width, d.max_len) and c.block_ids.dtype == d.block_ids.dtype
        and all(same(x, y) for x, y in ((c.block_ids, d.block_ids), (c.empty_slots, d.empty_slots), (c.rows, d.rows),
                                        (c.mask, d.mask)))
        for c, d in zip(a.chunks, b.chunks))


@pytest.mark.parametrize("lens", LENGTHS + [(1,), (16, 1, 17)])
@pytest.mark.parametrize("max_padding, max_chunk_slots", [(0, 16384), (256, 16384), (256, 64)])
@pytest.mark.parametrize("trim", [False, True])
def test_plan_from_block_lists_equals_plan_from_the_table(lens, max_padding, max_chunk_slots, trim):
    """The engine's Python block tables (padded like the tensor, or holding only the used blocks) plan the same chunks."""
    tables = make_case(lens, 16, 32, 8, 2, FP32, device="cpu")[3]
    lists = [row[:-(-n // 16)] if trim else row for row, n in zip(tables.tolist(), lens)]
    kwargs = dict(max_padding=max_padding, max_chunk_slots=max_chunk_slots)
    assert _same_plan(plan_buckets(lists, list(lens), 16, **kwargs), plan_buckets(tables, list(lens), 16, **kwargs))


def test_workspace_views_are_made_once_per_plan_and_cache_shape():
    query, key_cache, value_cache, tables, context = make_case(CONTEXT_LENS, 16, 32, 8, 2, FP32, device="cpu")
    scale, lens = 32 ** -0.5, context.tolist()
    workspace, plan = GatherWorkspace(), plan_buckets(tables, lens, 16)
    views = workspace.chunk_views(plan, key_cache)
    assert workspace.chunk_views(plan, key_cache) is views  # every later layer of the step
    ref = paged_attention_reference(query, key_cache, value_cache, tables, context, scale)
    for _ in range(2):
        assert_close(paged_attention_bucketed(query, key_cache, value_cache, plan, scale, workspace), ref, FP32)
    other = plan_buckets(tables, lens, 16)  # the next step's plan
    assert workspace.chunk_views(other, key_cache) is not views
    assert workspace.chunk_views(other, key_cache.double()) is not workspace.chunk_views(other, key_cache)
    half = make_case(CONTEXT_LENS, 16, 32, 8, 2, BF16, device="cpu")  # another dtype through the same workspace
    assert_close(paged_attention_bucketed(half[0], half[1], half[2], other, scale, workspace),
                 paged_attention_reference(half[0].float(), half[1].float(), half[2].float(), half[3], half[4], scale), BF16)
