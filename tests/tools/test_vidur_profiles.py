"""The builder of the measured GPU tables (paged.tools.vidur_profiles) on a small made-up profile tree:
Vidur's columns read the way its predictor reads them, medians kept, bins and errors as documented."""

from __future__ import annotations

import pytest

from paged.tools import vidur_profiles as vp

_OPS = ("emb", *vp.GEMMS, *vp.ELEMENTWISE)


def _tree(tmp_path, monkeypatch, *, shape=(5120, 40, 40, 13824)):
    monkeypatch.setattr(vp, "LAYER_MODELS", (("a100", "internlm/internlm-20b"),))
    monkeypatch.setattr(vp, "LAYER_TP", (1,))
    monkeypatch.setattr(vp, "LAYER_TOKENS", (1, 16))
    monkeypatch.setattr(vp, "ALL_REDUCE_NODES", (("a100", "a100_dgx"),))
    root = tmp_path / "vidur"
    (root / "compute/a100/internlm/internlm-20b").mkdir(parents=True)
    (root / "compute/a100/meta-llama/Meta-Llama-3-8B").mkdir(parents=True)
    (root / "network/a100_dgx").mkdir(parents=True)
    (root / "LICENSE").write_text("    MIT License\n\n    Copyright (c) Microsoft Corporation.\n")
    header = ",".join(f"time_stats.{op}.{s}" for op in _OPS for s in ("min", "max", "mean", "median", "std"))
    rows = [header + ",n_head,n_kv_head,n_embd,n_expanded_embd,vocab_size,use_gated_mlp,num_tokens,"
                     "num_tensor_parallel_workers"]
    hidden, heads, kv, inter = shape
    for n, scale in ((1, 1.0), (16, 2.0), (16, 4.0)):  # two rows at 16 tokens: their median is kept
        stats = ",".join(f"0,0,0,{scale * 0.001 * (i + 1)},0" for i, _ in enumerate(_OPS))
        rows.append(f"{stats},{heads},{kv},{hidden},{inter},103168,True,{n},1")
    (root / "compute/a100/internlm/internlm-20b/mlp.csv").write_text("\n".join(rows) + "\n")
    ar = [",time_stats.all_reduce.min,time_stats.all_reduce.max,time_stats.all_reduce.mean,"
          "time_stats.all_reduce.median,time_stats.all_reduce.std,rank,num_workers,size,collective,devices_per_node,"
          "max_devices_per_node"]
    for i, (size, ms, node) in enumerate(((40000, 0.02, 4), (50000, 0.04, 4), (50000, 0.5, 2), (2**26, 0.6, 4))):
        ar.append(f"{i},0,0,0,{ms},0,0,4,{size},all_reduce,{node},8")
    (root / "network/a100_dgx/all_reduce.csv").write_text("\n".join(ar) + "\n")
    (root / "compute/a100/meta-llama/Meta-Llama-3-8B/attention_rows.csv").write_text(
        "# comment\ndecode,8,128,0,0.012,0,0.002,\nprefill,1,0,512,0,0.048,0.152,a note\n")
    return root


def test_build_keeps_medians_in_microseconds_and_the_notice(tmp_path, monkeypatch):
    root = _tree(tmp_path, monkeypatch)
    out = tmp_path / "out"
    out.mkdir()
    paths = vp.build_vidur_tables(root, out)
    assert set(paths) == {vp.LAYER_FILE, vp.ALL_REDUCE_FILE, vp.ATTENTION_FILE, vp.LICENSE_FILE}
    layer = [line for line in (out / vp.LAYER_FILE).read_text().splitlines() if not line.startswith("#")]
    # ops in order emb, 4 GEMMs, 5 element-wise: medians (i+1) µs × scale; 16 tokens: the median of scales 2 and 4
    assert layer[1] == "a100,internlm-20b,1,1,2.0,3.0,4.0,5.0,40.0"
    assert layer[2] == "a100,internlm-20b,1,16,6.0,9.0,12.0,15.0,120.0"
    ar = [line for line in (out / vp.ALL_REDUCE_FILE).read_text().splitlines() if not line.startswith("#")]
    assert ar[1:] == ["a100,4,32768,65536,2,45000,30.0,25.0,35.0", "a100,4,33554432,67108864,1,67108864,600.0,600.0,600.0"]
    att = (out / vp.ATTENTION_FILE).read_text().splitlines()
    assert att[-2:] == ["decode,8,128,0,12.0,2.0,", "prefill,1,0,512,48.0,152.0,a note"]
    assert "Copyright (c) Microsoft Corporation." in (out / vp.LICENSE_FILE).read_text()
    first = {name: path.read_bytes() for name, path in paths.items()}
    vp.build_vidur_tables(root, out)
    assert {name: path.read_bytes() for name, path in paths.items()} == first  # byte for byte


def test_a_profile_of_another_shape_or_a_missing_tree_is_refused(tmp_path, monkeypatch):
    root = _tree(tmp_path, monkeypatch, shape=(4096, 32, 32, 11008))
    with pytest.raises(ValueError, match="is not VIDUR_SHAPES"):
        vp.build_vidur_tables(root, tmp_path)
    with pytest.raises(FileNotFoundError, match="no Vidur profiles"):
        vp.build_vidur_tables(tmp_path / "nowhere", tmp_path)
