"""Every launch the Triton launcher makes compiles for sm_80 (A100) and sm_90 (H100/H200) without
spills, on CPU, ahead of time (:mod:`paged.kernels.compile_check`).

The grid: fp16 and bf16 × head sizes 32/64/80/96/128/256 × block sizes 8/16/32 × query groups
1/4/5/8 × split-K on/off, and fp32 (not in the issue's grid) at block size 16 only, each with the
launch parameters the launcher picks for that shape and arch (the decode kernel, plus the reduce
kernel with split-K). Each (arch, dtype) is one test, so ``pytest -n 2`` spreads them over both
workers. Identical compiles are done once (groups 4, 5 and 8 share one kernel; the reduce kernel
does not depend on block size or group), and Triton's cache is a fresh temporary folder, so the
time is the cold one CI pays: about 0.3-0.6 s of one core per distinct kernel, 78 kernels per
fp16/bf16 test.

Only a triton wheel without its NVIDIA compiler tools (ptxas, cuobjdump) skips these tests.
"""

from __future__ import annotations

import pytest

from paged.kernels import compile_check as cc
from paged.kernels.launch_config import REDUCE_CONFIG, decode_config

CASES = [(arch, dtype) for arch in cc.ARCHS for dtype in ("float16", "bfloat16", "float32")]
_ELEMENT = {"float16": 2, "bfloat16": 2, "float32": 4}
MISSING = cc.missing_tools()


def _shapes(dtype: str) -> list[cc.KernelShape]:
    return cc.grid_shapes(dtype, block_sizes=(16,) if dtype == "float32" else cc.BLOCK_SIZES)


def _table(rows: list[dict]) -> str:
    return "\n".join(
        f"{r['arch']} {r['dtype']:8} head {r['head_size']:>3} block {r['block_size']:>2} group {r['queries_per_kv']} "
        f"split-K {'on ' if r['split_k'] else 'off'} {r['kernel']:6} tile {r['tile']:>2} warps {r['num_warps']} "
        f"stages {r['num_stages']} {'dot ' if r['padded_dot'] else 'elem'} → {r['registers']:>3} registers, "
        f"stack {r['stack_bytes']} B, {r['warps']} warps/SM" for r in rows)


@pytest.mark.slow
@pytest.mark.skipif(MISSING is not None, reason=f"no AOT compile check: {MISSING}")
@pytest.mark.parametrize("arch, dtype", CASES)
def test_every_launch_compiles_without_spills(arch, dtype, tmp_path):
    shapes = _shapes(dtype)
    rows, stats = cc.check_in_subprocess(shapes, [arch], cache_dir=tmp_path)
    decode = [r for r in rows if r["kernel"] == "decode"]
    reduce = [r for r in rows if r["kernel"] == "reduce"]
    assert len(decode) == len(shapes) and len(reduce) == sum(s.split_k for s in shapes)
    for row in decode:  # the check compiled the launcher's own pick for this arch
        picked = decode_config(row["head_size"], row["queries_per_kv"], _ELEMENT[dtype], cc.ARCHS[arch].capability)
        assert (row["tile"], row["num_warps"], row["num_stages"], row["padded_dot"]) == (
            picked.tile, picked.num_warps, picked.num_stages, picked.padded_dot)
    assert all(r["tile"] == REDUCE_CONFIG.tile and r["num_warps"] == REDUCE_CONFIG.num_warps for r in reduce)
    assert stats["compiles"] < len(rows)  # identical kernels compiled once
    bad = [(r, cc.violations(r)) for r in rows if cc.violations(r)]
    assert not bad, "launches that spill or exceed the limits:\n" + "\n".join(
        f"{_table([r])}: {'; '.join(why)}" for r, why in bad)
    print(f"\n{arch} {dtype}: {stats['launches']} launches, {stats['compiles']} distinct compiles, "
          f"{stats['seconds']:.0f} s\n" + _table(rows))


def test_violations_name_each_limit():
    row = {"stack_bytes": 0, "local_bytes": 0, "registers": 96, "warps": 24, "limit": "registers"}
    assert cc.violations(row) == []
    assert "spills" in cc.violations({**row, "stack_bytes": 8})[0]
    assert "registers >" in cc.violations({**row, "registers": 200})[0]
    assert "limited by shared" in cc.violations({**row, "warps": 8, "limit": "shared"})[0]


def test_occupancy_follows_the_cuda_rules():
    usage = cc.ResourceUsage(registers=128, stack_bytes=0, local_bytes=0, shared_bytes=0, compile_seconds=0)
    a100 = cc.ARCHS["sm_80"]
    # 128 registers × 32 threads = 4096 per warp; 65,536 / (4096 × 4 warps) = 4 programs.
    assert cc.occupancy(usage, 4, a100) == {"programs": 4, "warps": 16, "fraction": 0.25, "limit": "registers"}
    # 39 KiB of shared memory (+1 KiB reserved) per program: 164 KiB hold 4 on an A100, 5 on an H100.
    big = cc.ResourceUsage(32, 0, 0, 39 * 1024, 0)
    assert cc.occupancy(big, 4, a100)["programs"] == 4 and cc.occupancy(big, 4, a100)["limit"] == "shared"
    assert cc.occupancy(big, 4, cc.ARCHS["sm_90"])["programs"] == 5
    tiny = cc.ResourceUsage(16, 0, 0, 0, 0)
    assert cc.occupancy(tiny, 1, a100) == {"programs": 32, "warps": 32, "fraction": 0.5, "limit": "warps"}


def test_cuobjdump_parse_reads_the_kernel_line():
    text = ("Resource usage:\n Common:\n  GLOBAL:0\n Function paged_attention_decode_kernel:\n"
            "  REG:114 STACK:8 SHARED:0 LOCAL:0 CONSTANT[0]:488 TEXTURE:0 SURFACE:0 SAMPLER:0\n")
    assert cc._parse_resource_usage(text) == {"REG": 114, "STACK": 8, "LOCAL": 0, "SHARED": 0}
    with pytest.raises(RuntimeError, match="no resource usage"):
        cc._parse_resource_usage("Resource usage:\n")
