"""KV cache tensors (§4.1–§4.5, §5.1): sizes, writes by slot mapping, fused block copies, swapping,
and ``write`` + ``paged_attention`` through real block tables (fork, copy-on-write) against dense
attention over the same tokens."""

from __future__ import annotations

import pytest
import torch

from paged import BlockAllocator, BlockTable
from paged.kernels.attention import paged_attention
from paged.block.manager import PagedKVCacheManager
from paged.engine.kv_cache import PagedKVCache
from paged.core.sequence import Sequence, SequenceGroup, SequenceStatus


def small_cache(**kwargs) -> PagedKVCache:
    args = dict(num_layers=2, num_blocks=16, block_size=8, num_kv_heads=2, head_size=64, dtype=torch.float32)
    args.update(kwargs)
    return PagedKVCache(**args)


def test_shapes_and_bytes():
    cache = small_cache(num_cpu_blocks=4)
    assert len(cache.key_caches) == len(cache.value_caches) == 2
    assert cache.key_caches[1].shape == (16, 8, 2, 64) and cache.cpu_value_caches[0].shape == (4, 8, 2, 64)
    assert cache.nbytes == 2 * 2 * 16 * 8 * 2 * 64 * 4
    assert cache.cpu_nbytes == cache.nbytes // 4
    assert PagedKVCache.bytes_per_block(2, 8, 2, 64, torch.float32) * 16 == cache.nbytes


def test_budget():
    per_block = PagedKVCache.bytes_per_block(2, 8, 2, 64, torch.float16)
    assert PagedKVCache.num_blocks_for_budget(10 * per_block + 5, 2, 8, 2, 64, torch.float16) == 10
    small_cache(num_blocks=10, dtype=torch.float16, memory_budget_bytes=10 * per_block)
    with pytest.raises(ValueError, match=f"{11 * per_block:,} bytes.*{10 * per_block:,} bytes"):
        small_cache(num_blocks=11, dtype=torch.float16, memory_budget_bytes=10 * per_block)
    with pytest.raises(ValueError, match="holds no block"):
        PagedKVCache.num_blocks_for_budget(per_block - 1, 2, 8, 2, 64, torch.float16)
    with pytest.raises(ValueError, match="num_blocks"):
        small_cache(num_blocks=0)


def test_write_places_tokens_and_skips_padding():
    cache = small_cache()
    key, value = torch.randn(4, 2, 64), torch.randn(4, 2, 64)
    cache.write(1, torch.tensor([17, -1, 3, 127]), key, value)
    assert torch.equal(cache.key_caches[1][2, 1], key[0]) and torch.equal(cache.value_caches[1][0, 3], value[2])
    assert torch.equal(cache.key_caches[1][15, 7], key[3])
    assert int((cache.key_caches[1] != 0).any(-1).any(-1).sum()) == 3  # the -1 token went nowhere
    assert not cache.key_caches[0].any()  # other layers untouched


@pytest.mark.parametrize("slots, key_shape, dtype, error, match", [
    ([0, 128], (2, 2, 64), torch.float32, ValueError, "slots must be"),
    ([0, -2], (2, 2, 64), torch.float32, ValueError, "slots must be"),
    ([5, 5], (2, 2, 64), torch.float32, ValueError, "repeats a slot"),
    ([0, 1], (2, 2, 32), torch.float32, ValueError, "key/value"),
    ([0, 1], (2, 2, 64), torch.float16, TypeError, "dtype"),
])
def test_write_errors(slots, key_shape, dtype, error, match):
    cache = small_cache()
    key = torch.zeros(key_shape, dtype=dtype)
    with pytest.raises(error, match=match):
        cache.write(0, torch.tensor(slots), key, key)
    with pytest.raises(IndexError):
        cache.write(2, torch.tensor([0]), torch.zeros(1, 2, 64), torch.zeros(1, 2, 64))
    with pytest.raises(TypeError, match="integer"):
        cache.write(0, torch.tensor([0.0]), torch.zeros(1, 2, 64), torch.zeros(1, 2, 64))



@pytest.mark.parametrize("slots, error, match", [
    ([0, 128], ValueError, "slots must be"), ([5, 5], ValueError, "repeats a slot"),
    ([3, -1], ValueError, "holds -1"), ([[0, 1]], ValueError, "num_tokens"), ([0.0], TypeError, "integer"),
])
def test_check_slots_errors(slots, error, match):
    with pytest.raises(error, match=match):
        small_cache().check_slots(torch.tensor(slots))


@pytest.mark.parametrize("slots, match", [([0, 128], "slots must be"), ([5, 5], "repeats a slot"), ([3, -1], "holds -1"),
                                          ([-2, 0], "slots must be")])
def test_check_slot_list_raises_what_check_slots_raises(slots, match):
    for check in (small_cache().check_slot_list, lambda s: small_cache().check_slots(torch.tensor(s))):
        with pytest.raises(ValueError, match=match):
            check(slots)
    small_cache().check_slot_list([])
    small_cache().check_slot_list([127, 0, 5])


def test_write_checked_stores_what_write_stores():
    a, b = small_cache(), small_cache()
    key, value = torch.randn(3, 2, 64), torch.randn(3, 2, 64)
    a.write(1, torch.tensor([17, 3, 127]), key, value)
    b.write_checked(1, b.check_slots(torch.tensor([17, 3, 127], dtype=torch.int32)), key, value)
    assert torch.equal(a.key_caches[1], b.key_caches[1]) and torch.equal(a.value_caches[1], b.value_caches[1])

def test_copy_blocks_every_layer_in_one_call():
    cache = small_cache()
    for t in cache.key_caches + cache.value_caches:
        t.normal_()
    before = [t.clone() for t in cache.key_caches + cache.value_caches]
    cache.copy_blocks([(1, 5), (2, 6), (1, 5)])  # a repeated identical pair is applied once
    for old, new in zip(before, cache.key_caches + cache.value_caches):
        assert torch.equal(new[5], old[1]) and torch.equal(new[6], old[2]) and torch.equal(new[1], old[1])
        assert torch.equal(new[7:], old[7:])
    cache.copy_blocks([])
    with pytest.raises(ValueError, match="two different pairs"):
        cache.copy_blocks([(1, 5), (2, 5)])


def test_copy_blocks_one_source_to_several_destinations():
    """Three beam candidates leaving one shared last block: one source, two copies."""
    cache = small_cache()
    for t in cache.key_caches + cache.value_caches:
        t.normal_()
    cache.copy_blocks([(3, 8), (3, 9)])
    for t in cache.key_caches + cache.value_caches:
        assert torch.equal(t[8], t[3]) and torch.equal(t[9], t[3])
    with pytest.raises(ValueError, match="outside"):
        cache.copy_blocks([(1, 16)])


# -- through real block tables -----------------------------------------------------------------
NUM_HEADS, NUM_KV_HEADS, HEAD_SIZE, BLOCK_SIZE = 8, 2, 64, 8


class Stream:
    """One sequence: its block table and the K/V of every token it holds (layer 0), for dense checks."""

    def __init__(self, table: BlockTable, keys: list[torch.Tensor], values: list[torch.Tensor]):
        self.table, self.keys, self.values = table, keys, values

    def fork(self) -> Stream:
        return Stream(self.table.fork(), list(self.keys), list(self.values))

    def append(self, cache: PagedKVCache, n: int, gen: torch.Generator) -> list[tuple[int, int]]:
        start = self.table.num_tokens
        pairs = self.table.append_tokens(n)
        cache.copy_blocks(pairs)  # copy-on-write before writing into the fresh block
        key = torch.randn(n, NUM_KV_HEADS, HEAD_SIZE, generator=gen)
        value = torch.randn(n, NUM_KV_HEADS, HEAD_SIZE, generator=gen)
        cache.write(0, torch.tensor(self.table.slot_mapping(start, start + n)), key, value)
        self.keys += list(key)
        self.values += list(value)
        return pairs


def dense(query, keys, values):
    k = torch.stack(keys).repeat_interleave(NUM_HEADS // NUM_KV_HEADS, dim=1)
    v = torch.stack(values).repeat_interleave(NUM_HEADS // NUM_KV_HEADS, dim=1)
    probs = torch.softmax(torch.einsum("hd,lhd->hl", query, k) * HEAD_SIZE ** -0.5, dim=-1)
    return torch.einsum("hl,lhd->hd", probs, v)


def attend(cache, streams, query, backend):
    width = max(s.table.num_blocks for s in streams)
    tables = torch.tensor([s.table.physical_blocks + [0] * (width - s.table.num_blocks) for s in streams],
                          dtype=torch.int32)
    lens = torch.tensor([s.table.num_tokens for s in streams], dtype=torch.int32)
    return paged_attention(query, cache.key_caches[0], cache.value_caches[0], tables, lens, backend=backend)


@pytest.mark.parametrize("backend", ["reference", "triton"])
def test_block_tables_fork_and_copy_on_write_match_dense(backend):
    gen = torch.Generator().manual_seed(0)
    allocator = BlockAllocator(64, BLOCK_SIZE)
    cache = PagedKVCache(1, 64, BLOCK_SIZE, NUM_KV_HEADS, HEAD_SIZE, torch.float32)
    cache.key_caches[0].fill_(float("nan"))  # a read of a slot nobody wrote poisons the output
    cache.value_caches[0].fill_(float("nan"))
    parent = Stream(BlockTable(allocator), [], [])
    parent.append(cache, 13, gen)  # prompt: one full block + 5 tokens of a shared last block
    child = parent.fork()
    assert parent.table.physical_blocks == child.table.physical_blocks

    pairs = parent.append(cache, 1, gen)  # writes into the shared last block: copy-on-write
    assert len(pairs) == 1 and pairs[0][0] == child.table.physical_blocks[-1]
    assert child.append(cache, 1, gen) == []  # the last holder writes in place
    for _ in range(5):  # decode a few steps, crossing a block boundary
        parent.append(cache, 1, gen)
        child.append(cache, 1, gen)
    other = Stream(BlockTable(allocator), [], [])
    other.append(cache, 30, gen)

    streams = [parent, child, other]
    query = torch.randn(3, NUM_HEADS, HEAD_SIZE, generator=gen)
    out = attend(cache, streams, query, backend)
    for i, s in enumerate(streams):
        torch.testing.assert_close(out[i], dense(query[i], s.keys, s.values), atol=1e-5, rtol=1e-5)
    # Same query, shared prompt, different continuations: the outputs differ.
    same = attend(cache, [parent, child], query[:1].expand(2, -1, -1).contiguous(), backend)
    assert not torch.allclose(same[0], same[1], atol=1e-3)
    assert parent.table.physical_blocks[0] == child.table.physical_blocks[0]  # full prompt block still shared


def test_swap_out_and_in_restores_bytes_and_ref_counts():
    gen = torch.Generator().manual_seed(1)
    manager = PagedKVCacheManager(32, BLOCK_SIZE, num_cpu_blocks=32, watermark=0.0)
    cache = PagedKVCache(2, 32, BLOCK_SIZE, NUM_KV_HEADS, HEAD_SIZE, torch.float16, num_cpu_blocks=32)
    seqs = [Sequence(0, 13), Sequence(1, 13)]
    group = SequenceGroup("r0", 0.0, seqs, output_len=8)
    manager.allocate(group)  # both sequences share the prompt's blocks
    for seq in seqs:
        seq.status = SequenceStatus.RUNNING
    for t in cache.key_caches + cache.value_caches:
        t.copy_(torch.randn(t.shape, generator=gen).half())
    seqs[0].append_token()
    cache.copy_blocks(manager.append_slots(seqs[0]))  # copy-on-write: seq 0 gets its own last block
    for _ in range(4):
        for seq in seqs:
            seq.append_token()
            manager.append_slots(seq)

    def snapshot():
        tables = {s.seq_id: manager.get_block_table(s) for s in seqs}
        data = {i: torch.stack([c[tables[i]] for c in cache.key_caches + cache.value_caches]).clone()
                for i in tables}
        counts = {i: [manager.gpu_allocator.ref_count(b) for b in tables[i]] for i in tables}
        return data, counts

    data_before, counts_before = snapshot()
    assert counts_before[0][0] == 2  # the full prompt block is shared
    distinct = {b for s in seqs for b in manager.get_block_table(s)}
    mapping_out = manager.swap_out(group)
    assert len(mapping_out) == len(distinct)  # shared blocks move once
    cache.swap_out(mapping_out)
    for seq in seqs:
        seq.status = SequenceStatus.SWAPPED
    for t in cache.key_caches + cache.value_caches:
        t.fill_(float("nan"))  # the GPU copy is gone
    cache.swap_in(manager.swap_in(group))
    for seq in seqs:
        seq.status = SequenceStatus.RUNNING
    data_after, counts_after = snapshot()
    assert counts_after == counts_before
    for i in data_before:
        assert torch.equal(data_after[i].view(torch.int16), data_before[i].view(torch.int16))


def test_swap_mapping_errors():
    cache = small_cache(num_cpu_blocks=4)
    with pytest.raises(ValueError, match="two different pairs"):
        cache.swap_out([(1, 0), (2, 0)])  # two GPU blocks into one CPU block
    cache.swap_out([(1, 0), (1, 2)])  # one GPU block shared by two swapped groups: copied to both
    assert torch.equal(cache.cpu_key_caches[0][0], cache.cpu_key_caches[0][2])
    with pytest.raises(ValueError, match="outside"):
        cache.swap_out([(1, 4)])
    with pytest.raises(ValueError, match="outside"):
        cache.swap_in([(0, 16)])
    cache.swap_out([(3, 1), (3, 1)])  # identical duplicates are applied once
