"""The C CPU decode kernel against the fp32 reference, and how it is built, cached and given up (§4.1).

Cases come from ``support.make_case``: every slot a sequence does not own is NaN and padding entries
of the block tables are NaN blocks or ids far past the cache, so a stray read fails the test.
Lengths sit inside, at and across block boundaries; GQA groups 1, 2, 3, 4, 5 and 8 cover the
kernel's quads of query heads and its single heads; head sizes 32 / 64 / 128 (and 80) have AVX-512
instances, 40 takes the portable loops, which every case also runs on their own. The build tests
compile a few-line C file, not the kernel. Without a C compiler the kernel tests skip; CI has gcc.
"""

from __future__ import annotations

import ctypes
import logging
import subprocess
import threading
from pathlib import Path

import pytest
import torch
from support import BF16, CONTEXT_LENS, FP16, FP32, assert_close, make_case

from paged.kernels import cpu_kernel
from paged.kernels.cpu_kernel import (build_library, cache_key, compiler_command, load_kernel, paged_attention_cpu,
                                      plan_cpu_decode)
from paged.kernels.reference import paged_attention_reference

needs_compiler = pytest.mark.skipif(compiler_command() is None, reason="no C compiler (sysconfig CC, cc, gcc, clang)")


@pytest.fixture(scope="module")
def kernel():
    k = load_kernel()
    if k is None:
        pytest.skip("the CPU kernel did not build here (no C compiler, or PAGED_CPU_KERNEL=0)")
    return k


# (block_size, head_size, num_heads, num_kv_heads, dtype)
CASES = [(16, 32, 8, 2, FP32), (16, 32, 8, 2, BF16), (16, 32, 8, 2, FP16), (16, 64, 4, 4, FP32), (16, 128, 16, 2, FP32),
         (16, 64, 8, 1, BF16), (16, 128, 8, 4, BF16), (8, 32, 6, 2, FP32), (32, 64, 10, 2, FP16), (16, 80, 4, 2, BF16),
         (16, 40, 8, 2, FP32), (16, 40, 4, 1, BF16), (1, 32, 4, 4, FP32), (64, 32, 16, 2, FP32),
         # wide rows: chunks of fewer tiles (CHUNK_BYTES), 8 with bf16 and 8 KV heads, 1 with OPT-13B's heads
         (16, 128, 16, 8, BF16), (16, 128, 40, 40, FP32)]
LENGTHS = [CONTEXT_LENS, (16, 1, 17, 32, 31, 300)]


def _reference(query, key_cache, value_cache, tables, lens, scale):
    return paged_attention_reference(query.float(), key_cache.float(), value_cache.float(), tables, lens, scale)


@needs_compiler
@pytest.mark.parametrize("block_size, head_size, num_heads, num_kv_heads, dtype", CASES)
@pytest.mark.parametrize("lens", LENGTHS)
@pytest.mark.parametrize("portable", [False, True])
def test_kernel_matches_reference(kernel, block_size, head_size, num_heads, num_kv_heads, dtype, lens, portable):
    query, key_cache, value_cache, tables, context = make_case(lens, block_size, head_size, num_heads, num_kv_heads,
                                                               dtype, device="cpu")
    scale = head_size ** -0.5
    plan = plan_cpu_decode(kernel, tables, context, block_size)
    out = paged_attention_cpu(query, key_cache, value_cache, plan, scale, portable=portable)
    assert_close(out, _reference(query, key_cache, value_cache, tables, context, scale), dtype)


@needs_compiler
def test_paths_of_this_build(kernel):
    flags = cpu_kernel.cpu_identity().split()
    other = "avx2" if "avx2" in flags and "fma" in flags else "portable"
    for dtype in (FP32, BF16, FP16):
        for head_size in cpu_kernel.SPECIALIZED_HEAD_SIZES:
            assert kernel.code(dtype, head_size) == ("avx512" if "avx512f" in flags else other)
        assert kernel.code(dtype, 40) == other
    assert kernel.code(torch.float64, 32) == "none" and not kernel.fast(torch.float64, 32)


@needs_compiler
@pytest.mark.parametrize("trim", [False, True])
def test_plan_from_block_lists_equals_plan_from_the_table(kernel, trim):
    """The engine's Python block tables (padded like the tensor, or holding only the used blocks) give the same output."""
    lens = (16, 1, 17, 1000, 33)
    query, key_cache, value_cache, tables, context = make_case(lens, 16, 32, 8, 2, FP32, device="cpu")
    lists = [row[:-(-n // 16)] if trim else row for row, n in zip(tables.tolist(), lens)]
    from_tensor = paged_attention_cpu(query, key_cache, value_cache, plan_cpu_decode(kernel, tables, context, 16), 0.2)
    from_lists = paged_attention_cpu(query, key_cache, value_cache, plan_cpu_decode(kernel, lists, list(lens), 16), 0.2)
    assert torch.equal(from_tensor, from_lists)


@needs_compiler
def test_strided_query_and_repeated_calls_with_other_shapes(kernel):
    """The engine's query is a transposed view; a plan serves calls of different shapes (refilled args)."""
    lens = (40, 7, 129)
    query, key_cache, value_cache, tables, context = make_case(lens, 16, 64, 8, 2, BF16, device="cpu")
    strided = query.transpose(0, 1).contiguous().transpose(0, 1)  # [seqs, heads, d] with heads outermost in memory
    assert strided.stride(0) != 8 * 64
    plan = plan_cpu_decode(kernel, tables, context, 16)
    ref = _reference(query, key_cache, value_cache, tables, context, 0.125)
    assert_close(paged_attention_cpu(strided, key_cache, value_cache, plan, 0.125), ref, BF16)
    other = make_case(lens, 16, 32, 4, 4, FP32, seed=1, device="cpu")
    assert_close(paged_attention_cpu(*other[:3], plan_cpu_decode(kernel, other[3], other[4], 16), 0.3),
                 _reference(*other, 0.3), FP32)
    assert_close(paged_attention_cpu(query, key_cache, value_cache, plan, 0.125), ref, BF16)


@needs_compiler
@pytest.mark.parametrize("num_threads", [2, 3, 8])
def test_threads_split_the_sequences_and_change_no_bit(kernel, monkeypatch, num_threads):
    lens = (1000, 5, 300, 17, 16, 640, 2)
    query, key_cache, value_cache, tables, context = make_case(lens, 16, 32, 8, 2, FP32, device="cpu")
    one = paged_attention_cpu(query, key_cache, value_cache, plan_cpu_decode(kernel, tables, context, 16, 1), 0.2)
    monkeypatch.setattr(cpu_kernel, "MIN_PARALLEL_BYTES", 0)
    plan = plan_cpu_decode(kernel, tables, context, 16, num_threads)
    assert torch.equal(paged_attention_cpu(query, key_cache, value_cache, plan, 0.2), one)
    assert plan.num_threads == num_threads


@needs_compiler
def test_empty_batch_and_bad_inputs(kernel):
    plan = plan_cpu_decode(kernel, torch.zeros(0, 2, dtype=torch.int32), torch.zeros(0, dtype=torch.int32), 16)
    assert paged_attention_cpu(torch.zeros(0, 8, 32), torch.zeros(4, 16, 2, 32), torch.zeros(4, 16, 2, 32), plan,
                               0.1).shape == (0, 8, 32)
    query, key_cache, value_cache, tables, context = make_case((5,), 16, 32, 8, 2, FP32, device="cpu")
    plan = plan_cpu_decode(kernel, tables, context, 16)
    with pytest.raises(TypeError):
        paged_attention_cpu(query.double(), key_cache.double(), value_cache.double(), plan, 0.1)
    with pytest.raises(TypeError):
        paged_attention_cpu(query, key_cache.transpose(1, 2), value_cache, plan, 0.1)
    with pytest.raises(TypeError):
        plan_cpu_decode(kernel, tables.long(), context, 16)
    with pytest.raises(RuntimeError, match="head"):  # 8 query heads over 3 KV heads
        paged_attention_cpu(query, torch.zeros(4, 16, 3, 32), torch.zeros(4, 16, 3, 32), plan, 0.1)


# ----------------------------------------------------------------------------------------- building

TINY = "int answer(void) { return 42; }\n"


def _tiny(tmp_path: Path, text: str = TINY) -> Path:
    source = tmp_path / "tiny.c"
    source.write_text(text)
    return source


def test_cache_key_follows_source_compiler_flags_and_cpu(tmp_path):
    cc = tmp_path / "cc"
    cc.write_text("#!/bin/sh\n")
    base = cache_key(b"x", [str(cc)], ("-O3",), cpu="avx512f")
    assert base == cache_key(b"x", [str(cc)], ("-O3",), cpu="avx512f") and len(base) == 20
    others = {cache_key(b"y", [str(cc)], ("-O3",), cpu="avx512f"), cache_key(b"x", [str(cc), "-m32"], ("-O3",), cpu="avx512f"),
              cache_key(b"x", [str(cc)], ("-O2",), cpu="avx512f"), cache_key(b"x", [str(cc)], ("-O3",), cpu="avx2")}
    cc.write_text("#!/bin/sh\n# another compiler build\n")
    others.add(cache_key(b"x", [str(cc)], ("-O3",), cpu="avx512f"))
    assert base not in others and len(others) == 5


@needs_compiler
def test_build_is_cached_and_loads(tmp_path):
    path, seconds = build_library(_tiny(tmp_path), tmp_path / "cache")
    assert seconds > 0 and ctypes.CDLL(str(path)).answer() == 42
    again, seconds_again = build_library(_tiny(tmp_path), tmp_path / "cache")
    assert again == path and seconds_again == 0.0
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [path.name]  # no temporary file left


@needs_compiler
def test_concurrent_builds_each_rename_a_whole_library(tmp_path):
    """Builds racing for one name: each succeeds, the file is always whole when it exists, no temporary file stays."""
    source = _tiny(tmp_path, TINY + "".join(f"int f{i}(int x) {{ return x * {i}; }}\n" for i in range(2000)))
    results, errors, seen = [], [], []

    def build():
        try:
            results.append(build_library(source, tmp_path / "cache")[0])
        except Exception as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=build) for _ in range(3)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        for p in (tmp_path / "cache").glob("tiny-*.so"):
            seen.append(ctypes.CDLL(str(p)).answer())  # a visible library is a complete one
    for t in threads:
        t.join()
    assert not errors and len(set(results)) == 1 and ctypes.CDLL(str(results[0])).answer() == 42
    assert all(v == 42 for v in seen)
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [results[0].name]


@needs_compiler
def test_failed_compile_raises_and_leaves_nothing(tmp_path):
    with pytest.raises(subprocess.CalledProcessError):
        build_library(_tiny(tmp_path, "int broken(void) { return }\n"), tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []


@pytest.fixture
def fresh_loader(monkeypatch, tmp_path):
    """load_kernel as in a new process, building into an empty cache folder."""
    monkeypatch.setattr(cpu_kernel, "_loaded", {})
    monkeypatch.setenv("PAGED_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(cpu_kernel.ENV_SWITCH, raising=False)


def test_no_compiler_falls_back_silently(fresh_loader, monkeypatch, caplog, capfd):
    monkeypatch.setattr(cpu_kernel, "compiler_command", lambda: None)
    with caplog.at_level(logging.DEBUG, logger="paged.kernels.cpu_kernel"):
        assert load_kernel() is None
        assert load_kernel() is None  # remembered, not retried
    assert "no C compiler" in caplog.text
    assert capfd.readouterr() == ("", "")


def test_failed_compile_falls_back_silently(fresh_loader, monkeypatch, tmp_path, caplog, capfd):
    cc = tmp_path / "failing-cc"
    cc.write_text("#!/bin/sh\necho 'cc: error: something broke' >&2\nexit 1\n")
    cc.chmod(0o755)
    monkeypatch.setattr(cpu_kernel, "compiler_command", lambda: [str(cc)])
    with caplog.at_level(logging.DEBUG, logger="paged.kernels.cpu_kernel"):
        assert load_kernel() is None
    assert "something broke" in caplog.text
    assert capfd.readouterr() == ("", "")


def test_environment_switch_turns_it_off(fresh_loader, monkeypatch):
    called = []
    monkeypatch.setattr(cpu_kernel, "compiler_command", lambda: called.append(1))
    monkeypatch.setenv(cpu_kernel.ENV_SWITCH, "0")
    assert load_kernel() is None and not called
