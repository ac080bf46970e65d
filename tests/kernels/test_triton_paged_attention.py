"""Triton paged-attention kernel vs the torch reference (§4.1, §5.1), on CPU via Triton's interpreter.

The grid. The issue's axes are context lengths {1, 15, 16, 17, 33, 1000}, block sizes {8, 16, 32},
head sizes {64, 80, 128}, (heads, KV heads) {(4, 4), (8, 2), (5, 1), (28, 4)} and dtypes
{fp32, fp16}. Every case is one batch holding *all six* context lengths (shuffled), so context
length is crossed with everything. The other four axes are covered all-pairs: the 12 rows of
``GRID`` contain every pair of values of any two axes (checked by ``test_grid_is_all_pairs``),
instead of the 72 of the full product. Each row runs the single-pass or the split-K path
(alternately), and extra rows cover head sizes 96 and 256, block sizes 64 and 128 and bf16.

Stray reads. The caches come from a pool about 4× larger than needed, filled with NaN except the
slots a sequence really holds, so the unused tail of every last block is NaN; block-table padding
entries point at NaN-filled blocks or far outside the cache. Any read past a context length
therefore turns the output into NaN (or crashes) and fails the comparison.

Tolerances (max abs / rel vs the fp32 reference): fp32 1e-5 / 1e-4; fp16 2e-3 / 1e-2 (the kernel
rounds the softmax weights to fp16 before the P·V product, as flash attention does); bf16
1.6e-2 / 1.6e-2.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import pytest
import torch
from support import BF16, CONTEXT_LENS, FP16, FP32, assert_close, make_case

from paged.kernels.attention import paged_attention
from paged.kernels import gather_kv, paged_attention_reference, paged_attention_torch
from paged.kernels import triton_paged_attention as kernel
from paged.kernels.launch_config import LaunchConfig, decode_config
from paged.kernels.reference import contiguous_attention

CUDA = torch.cuda.is_available() and not kernel.INTERPRETED
DEVICE = "cuda" if CUDA else "cpu"

# (block_size, head_size, (num_heads, num_kv_heads), dtype): all pairs of the axes.
GRID = [
    (8, 64, (4, 4), FP32), (8, 80, (8, 2), FP16), (16, 64, (5, 1), FP16), (16, 80, (28, 4), FP32),
    (32, 128, (4, 4), FP16), (8, 128, (5, 1), FP32), (32, 64, (8, 2), FP32), (8, 64, (28, 4), FP16),
    (16, 128, (8, 2), FP32), (32, 80, (5, 1), FP32), (16, 80, (4, 4), FP32), (32, 128, (28, 4), FP32),
]
# Head size 32 is the shipped small model's (8 query heads, 2 KV heads).
EXTRA = [(64, 96, (6, 2), FP16), (128, 256, (8, 8), FP32), (16, 64, (8, 1), BF16), (16, 32, (8, 2), FP32)]


def dense_attention(query, keys, values, scale):
    """Token-by-token oracle for one sequence: query [H, D], keys/values [L, KVH, D] (fp64)."""
    group = query.shape[0] // keys.shape[1]
    k = keys.double().repeat_interleave(group, dim=1)
    v = values.double().repeat_interleave(group, dim=1)
    probs = torch.softmax(torch.einsum("hd,lhd->hl", query.double(), k) * scale, dim=-1)
    return torch.einsum("hl,lhd->hd", probs, v)


def test_grid_is_all_pairs():
    rows = [(b, h, hk, str(d)) for b, h, hk, d in GRID]
    for i, j in itertools.combinations(range(4), 2):
        axis_i = {r[i] for r in rows}
        axis_j = {r[j] for r in rows}
        assert {(r[i], r[j]) for r in rows} == set(itertools.product(axis_i, axis_j))


def test_reference_matches_token_by_token_gather():
    case = make_case((1, 17, 40), 16, 64, 8, 2, FP32, device="cpu")
    query, key_cache, value_cache, block_tables, lens = case
    ref = paged_attention_reference(*case, scale=0.125)
    for seq, n in enumerate(lens.tolist()):
        rows = [block_tables[seq, t // 16].item() for t in range(n)]
        keys = torch.stack([key_cache[b, t % 16] for t, b in enumerate(rows)])
        values = torch.stack([value_cache[b, t % 16] for t, b in enumerate(rows)])
        torch.testing.assert_close(ref[seq].double(), dense_attention(query[seq], keys, values, 0.125),
                                   atol=1e-5, rtol=1e-5)
    # The SDPA paths agree with the oracle too (fp32).
    torch.testing.assert_close(paged_attention_torch(*case, scale=0.125), ref, atol=1e-5, rtol=1e-5)
    key, value = gather_kv(key_cache, value_cache, block_tables, lens, 40)
    torch.testing.assert_close(contiguous_attention(query, key, value, lens, 0.125), ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("row", range(len(GRID) + len(EXTRA)))
def test_triton_matches_reference(row):
    block_size, head_size, (num_heads, num_kv_heads), dtype = (GRID + EXTRA)[row]
    order = torch.randperm(len(CONTEXT_LENS), generator=torch.Generator().manual_seed(row)).tolist()
    lens = tuple(CONTEXT_LENS[i] for i in order)
    case = make_case(lens, block_size, head_size, num_heads, num_kv_heads, dtype, seed=row)
    out = paged_attention(*case, backend="triton", split_k=row % 2 == 1)
    assert_close(out, paged_attention_reference(*case, scale=head_size ** -0.5), dtype)


@pytest.mark.parametrize("dtype", [FP32, FP16])
def test_split_k_many_partitions(dtype):
    """Partitions of 64 tokens: up to 16 per sequence, and empty ones for the short sequences."""
    case = make_case((1000, 1, 64, 65, 700), 16, 128, 8, 2, dtype, seed=7)
    ref = paged_attention_reference(*case, scale=0.1)
    out = kernel.paged_attention_triton(*case, scale=0.1, split_k=True, partition_size=64)
    assert_close(out, ref, dtype)
    single = kernel.paged_attention_triton(*case, scale=0.1, split_k=False)
    assert_close(single, ref, dtype)


@pytest.mark.parametrize("dtype", [FP32, FP16])
@pytest.mark.parametrize("padded_dot", [False, True])
@pytest.mark.parametrize("split_k", [False, True])
def test_group_of_one_both_paths(dtype, padded_dot, split_k):
    """No GQA (one query head per KV head, like OPT-13B): the elementwise path the launcher picks and
    the padded tl.dot both match the reference, single pass and split-K (partitions of 64 tokens)."""
    case = make_case((1, 16, 17, 300), 16, 128, 4, 4, dtype, seed=11)
    config = LaunchConfig(tile=32 if padded_dot else 16, num_warps=4, num_stages=2, padded_dot=padded_dot)
    out = kernel.paged_attention_triton(*case, scale=128 ** -0.5, split_k=split_k, partition_size=64, config=config)
    assert_close(out, paged_attention_reference(*case, scale=128 ** -0.5), dtype)


def test_launcher_picks_the_elementwise_path_for_groups_of_one():
    assert not decode_config(128, 1, 2).padded_dot and decode_config(128, 4, 2).padded_dot
    _, launches = kernel.plan_paged_attention(*make_case((5,), 16, 64, 4, 4, FP16, device="cpu"), scale=0.1)
    assert launches[0].constexprs["USE_DOT"] is False and launches[0].constexprs["GROUP_PAD"] == 1
    _, launches = kernel.plan_paged_attention(*make_case((5,), 16, 64, 8, 2, FP16, device="cpu"), scale=0.1,
                                              split_k=True)
    assert launches[0].constexprs["GROUP_PAD"] == 16 and [l.grid for l in launches] == [(1, 2, 1), (1, 8, 1)]
    with pytest.raises(ValueError, match="elementwise path serves query groups ≤ 1"):
        kernel.plan_paged_attention(*make_case((5,), 16, 64, 8, 2, FP16, device="cpu"), scale=0.1,
                                    config=LaunchConfig(16, 4, 2, padded_dot=False))


def test_misaligned_cache_is_refused():
    """The compiled variant assumes 16-byte-aligned K/V (what Triton specialises on); a view 4 bytes
    into its storage is refused with the reason instead of running a variant that spills."""
    case = list(make_case((5, 20), 16, 64, 4, 4, FP32, device="cpu"))
    shifted = torch.empty(case[1].numel() + 1, dtype=FP32)[1:].view(case[1].shape)
    shifted.copy_(case[1])
    with pytest.raises(ValueError, match="key_cache must start at a 16-byte-aligned address"):
        kernel.paged_attention_triton(case[0], shifted, case[2], case[3], case[4], scale=0.125)
    strided = torch.empty(*case[1].shape[:3], 72, dtype=FP32)[..., :64]  # a head stride of 72 elements
    with pytest.raises(ValueError, match="strides .* multiples of 16"):
        kernel.paged_attention_triton(case[0], case[1], strided, case[3], case[4], scale=0.125)


def test_split_k_rule():
    assert kernel.use_split_k(num_seqs=1, num_kv_heads=8, max_context_len=4096, num_sms=132)
    assert not kernel.use_split_k(num_seqs=1, num_kv_heads=8, max_context_len=512, num_sms=132)
    assert not kernel.use_split_k(num_seqs=32, num_kv_heads=40, max_context_len=4096, num_sms=132)


def test_auto_backend_and_default_scale():
    case = make_case((5, 33), 16, 64, 4, 4, FP32, device="cpu")
    ref = paged_attention_reference(*case, scale=64 ** -0.5)
    torch.testing.assert_close(paged_attention(*case), ref)  # auto on CPU: the reference
    torch.testing.assert_close(paged_attention(*case, backend="reference", scale=0.125), ref)


def test_empty_batch():
    case = make_case((5,), 16, 64, 4, 4, FP32, device="cpu")
    empty = (case[0][:0], case[1], case[2], case[3][:0], case[4][:0])
    assert paged_attention(*empty).shape == (0, 4, 64)


def _good():
    return list(make_case((5, 20), 16, 64, 8, 2, FP32, device="cpu"))


@pytest.mark.parametrize("change, error, match", [
    (lambda a: a.__setitem__(3, a[3].long()), TypeError, "int32"),
    (lambda a: a.__setitem__(4, a[4].long()), TypeError, "int32"),
    (lambda a: a.__setitem__(0, a[0].half()), TypeError, "dtype"),
    (lambda a: a.__setitem__(0, a[0].int()), TypeError, "not supported"),
    (lambda a: a.__setitem__(0, a[0][:, :5]), ValueError, "multiple of num_kv_heads"),
    (lambda a: a.__setitem__(0, a[0][0]), ValueError, "query must be"),
    (lambda a: a.__setitem__(2, a[2][:, :8]), ValueError, "value_cache shape"),
    (lambda a: a.__setitem__(4, torch.tensor([0, 20], dtype=torch.int32)), ValueError, "≥ 1"),
    (lambda a: a.__setitem__(4, torch.tensor([5, 1000], dtype=torch.int32)), ValueError, "capacity"),
    (lambda a: a.__setitem__(4, a[4][:1]), ValueError, "context_lens must be"),
    (lambda a: a[3].__setitem__((0, 0), 10**6), ValueError, "block table entries"),
    (lambda a: a[3].__setitem__((1, 1), -1), ValueError, "block table entries"),
    (lambda a: a.__setitem__(1, a[1][:, :12]), ValueError, "value_cache shape"),
    (lambda a: a.__setitem__(0, a[0].numpy()), TypeError, "query must be a torch.Tensor"),
])
def test_bad_inputs(change, error, match):
    args = _good()
    change(args)
    with pytest.raises(error, match=match):
        paged_attention(*args)


@pytest.mark.parametrize("head_size, block_size, match", [(48, 16, "head_size 48"), (64, 12, "block_size 12")])
def test_unsupported_shapes(head_size, block_size, match):
    """The Triton kernel refuses shapes it is not tested with; the reference takes any shape."""
    query = torch.randn(1, 4, head_size)
    cache = torch.randn(8, block_size, 4, head_size)
    args = (query, cache, cache, torch.zeros(1, 1, dtype=torch.int32), torch.ones(1, dtype=torch.int32))
    with pytest.raises(ValueError, match=match):
        paged_attention(*args, backend="triton")
    out = paged_attention(*args, backend="reference")
    assert out.shape == query.shape and torch.isfinite(out).all()


def test_reference_block_size_one():
    """Block size 1 (every token its own block) through the reference backend."""
    torch.manual_seed(0)
    query = torch.randn(2, 4, 32)
    cache_k, cache_v = torch.randn(10, 1, 2, 32), torch.randn(10, 1, 2, 32)
    tables = torch.tensor([[3, 7, 1], [9, 0, 0]], dtype=torch.int32)
    lens = torch.tensor([3, 1], dtype=torch.int32)
    out = paged_attention(query, cache_k, cache_v, tables, lens, backend="reference")
    k = cache_k[[3, 7, 1], 0].repeat_interleave(2, dim=1)  # [3, 4, 32]
    v = cache_v[[3, 7, 1], 0].repeat_interleave(2, dim=1)
    p = torch.softmax(torch.einsum("hd,thd->ht", query[0], k) / 32**0.5, dim=-1)
    torch.testing.assert_close(out[0], torch.einsum("ht,thd->hd", p, v), rtol=1e-5, atol=1e-5)


def test_bad_scale_and_backend():
    args = _good()
    with pytest.raises(ValueError, match="scale"):
        paged_attention(*args, scale=-1.0)
    with pytest.raises(ValueError, match="backend"):
        paged_attention(*args, backend="cuda")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only error")
def test_triton_on_cpu_without_interpreter_says_how():
    code = ("import torch; from paged.kernels.attention import paged_attention\n"
            "q = torch.zeros(1, 4, 64); c = torch.zeros(4, 16, 4, 64)\n"
            "paged_attention(q, c, c, torch.zeros(1, 1, dtype=torch.int32), torch.ones(1, dtype=torch.int32),"
            " backend='triton')\n")
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "TRITON_INTERPRET=1" in result.stderr


# -- GPU only -------------------------------------------------------------------------------
def gpu(test):
    """GPU-only: marked ``gpu`` (``make gpu-check`` runs ``-m gpu``) and skipped without CUDA."""
    return pytest.mark.gpu(pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (compiled Triton)")(test))


@gpu
@pytest.mark.parametrize("dtype", [FP16, BF16, FP32])
@pytest.mark.parametrize("block_size, head_size, heads", [(8, 80, (5, 1)), (16, 128, (40, 40)),
                                                         (32, 96, (32, 8)), (128, 256, (8, 1))])
@pytest.mark.parametrize("split_k", [False, True])
def test_gpu_full_dtypes(dtype, block_size, head_size, heads, split_k):
    case = make_case(CONTEXT_LENS + (4097,), block_size, head_size, *heads, dtype, device="cuda")
    out = paged_attention(*case, backend="triton", split_k=split_k)
    assert_close(out, paged_attention_reference(*case, scale=head_size ** -0.5), dtype)


@gpu
def test_gpu_large_block_ids_do_not_overflow():
    """Block ids whose byte offset exceeds 2**31 (the kernel widens ids to int64)."""
    num_blocks, block_size, heads, head_size = 70_000, 16, 8, 128  # 70k*16*8*128*2 B ≈ 2.3 GB per cache
    key_cache = torch.randn(num_blocks, block_size, heads, head_size, dtype=FP16, device="cuda")
    value_cache = torch.randn_like(key_cache)
    block_tables = torch.tensor([[num_blocks - 1, num_blocks - 2, 3]], dtype=torch.int32, device="cuda")
    lens = torch.tensor([40], dtype=torch.int32, device="cuda")
    query = torch.randn(1, heads, head_size, dtype=FP16, device="cuda")
    out = paged_attention(query, key_cache, value_cache, block_tables, lens, backend="triton")
    assert_close(out, paged_attention_reference(query, key_cache, value_cache, block_tables, lens,
                                                head_size ** -0.5), FP16)


@pytest.mark.parametrize("device, match", [("gpu", "must be 'auto', 'cpu'"), ("cuda:x", "must be 'auto', 'cpu'")])
def test_benchmark_device_names_the_problem(device, match):
    from paged.experiments.nb04_kernel.kernel import resolve_device

    with pytest.raises(ValueError, match=match):
        resolve_device(device)
    assert resolve_device("cpu").type == "cpu"
