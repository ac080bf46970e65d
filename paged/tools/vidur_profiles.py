"""Derive the committed tables of measured GPU operator times from Vidur's profiles (``make data``).

Vidur (Agrawal et al., MLSys 2024; GitHub microsoft/vidur, MIT) publishes per-operator CUDA-event
timings of transformer layers on A100 and H100 GPUs and NCCL all-reduce timings of DGX nodes. Its
execution-time predictor (``vidur/execution_time_predictor/``) reads them this way, and so do these
tables: a layer's operators are looked up by the model's shape, the tensor-parallel degree and the
batch's token count (column ``num_tokens``), each by its ``time_stats.<op>.median`` (ms); an
all-reduce by ``num_workers`` with ``devices_per_node == num_workers`` (one node) and the message
``size`` (fp16 elements). This module keeps medians only, at the token counts and message sizes the
simulator's iterations span, in three small CSVs (a few kB each) beside Vidur's MIT notice:

* :data:`LAYER_FILE`: per (GPU, model, TP degree, tokens) the four GEMMs (QKV, attention output,
  MLP up with its gate, MLP down) and the sum of the element-wise operators (two norms, rotary
  embedding, activation, residual add), µs per layer; the model's shape beside it;
* :data:`ALL_REDUCE_FILE`: per (GPU, workers, power-of-two size bin) the median of the measured
  medians, with the quartiles (small messages are bimodal) and the row count;
* :data:`ATTENTION_FILE`: the 27 FlashInfer attention points (A100, Meta-Llama-3-8B) of the shared
  subset, µs per layer.

    python -m paged traces --out-dir data --shared-data ../shared/data   # make data: also these

writes them byte for byte as committed. Only this module reads Vidur's raw files.
"""

from __future__ import annotations

from pathlib import Path

from paged.atomic import write_text
from paged.sim.gpu_measurements import VIDUR_SHAPES

__all__ = ["VIDUR_COMMIT", "LAYER_FILE", "ALL_REDUCE_FILE", "ATTENTION_FILE", "LICENSE_FILE", "LAYER_MODELS",
           "LAYER_TOKENS", "LAYER_TP", "build_vidur_tables"]

#: The Vidur commit the shared profiles were taken from (its ``data/profiling/``).
VIDUR_COMMIT = "7d47513363ec447a741ac5e47241580b47724fbf"
LAYER_FILE = "vidur_layer_medians.csv"
ALL_REDUCE_FILE = "vidur_all_reduce_medians.csv"
ATTENTION_FILE = "vidur_attention_medians.csv"
LICENSE_FILE = "vidur_LICENSE.md"
#: (GPU, Vidur model id) of the layer table: every profiled shape once per GPU (A100 Llama-2-70B
#: has Llama-3-70B's layer, so only the latter is kept for the A100). The table names a model by
#: the id's last part; its shape is :data:`paged.sim.gpu_measurements.VIDUR_SHAPES` (checked here).
LAYER_MODELS = (("a100", "meta-llama/Meta-Llama-3-8B"), ("a100", "meta-llama/Llama-2-7b-hf"),
                ("a100", "internlm/internlm-20b"), ("a100", "Qwen/Qwen-72B"), ("a100", "meta-llama/Meta-Llama-3-70B"),
                ("h100", "meta-llama/Llama-2-7b-hf"), ("h100", "internlm/internlm-20b"), ("h100", "Qwen/Qwen-72B"),
                ("h100", "meta-llama/Llama-2-70b-hf"))
#: Tokens per iteration kept: decode batches, the memory/compute knee, prefills.
LAYER_TOKENS = (1, 16, 64, 128, 192, 256, 384, 512, 1024, 2048, 4096)
#: Tensor-parallel degrees kept: the simulated servers use 1, 4 and 8 GPUs.
LAYER_TP = (1, 4, 8)
GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
ELEMENTWISE = ("input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add")
#: All-reduce size bins: [2^k, 2^(k+1)) fp16 elements, the last one closed at 2^26 (Vidur's largest).
ALL_REDUCE_BINS = tuple(range(11, 26))
ALL_REDUCE_NODES = (("a100", "a100_dgx"), ("h100", "h100_dgx"))


def _us(ms: float) -> str:
    return f"{ms * 1e3:.1f}"


def _source(files: str) -> list[str]:
    return [f"# source: Vidur (Agrawal et al., MLSys 2024), GitHub microsoft/vidur commit {VIDUR_COMMIT}, "
            f"data/profiling/{files}",
            f"# licence: MIT, Copyright (c) Microsoft Corporation; the notice is in {LICENSE_FILE} beside this file",
            "# rebuild: make data (python -m paged traces --out-dir data --shared-data ../shared/data)"]


def _layer_table(vidur: Path) -> str:
    import pandas as pd

    lines = _source("compute/{a100,h100}/<model>/mlp.csv") + [
        "# one transformer layer on one GPU of a tensor-parallel group: medians of Vidur's time_stats.<op>.median, "
        "microseconds", "# elementwise_us = input_layernorm + post_attention_layernorm + attn_rope + mlp_act + add",
        "gpu,model,tp,num_tokens," + ",".join(f"{g}_us" for g in GEMMS) + ",elementwise_us"]
    for gpu, model in LAYER_MODELS:
        df = pd.read_csv(vidur / "compute" / gpu / model / "mlp.csv").drop_duplicates()
        shape = df[["n_embd", "n_head", "n_kv_head", "n_expanded_embd"]].drop_duplicates()
        if len(shape) != 1 or not df["use_gated_mlp"].all():
            raise ValueError(f"{gpu}/{model}: expected one gated-MLP shape, got {shape.to_dict('records')}")
        name = model.split("/")[-1]
        if tuple(int(v) for v in shape.iloc[0]) != VIDUR_SHAPES[name]:
            raise ValueError(f"{gpu}/{model}: shape {shape.iloc[0].tolist()} is not VIDUR_SHAPES[{name!r}]")
        for tp in LAYER_TP:
            for n in LAYER_TOKENS:
                rows = df[(df["num_tensor_parallel_workers"] == tp) & (df["num_tokens"] == n)]
                if not len(rows):
                    raise ValueError(f"{gpu}/{model}: no row for tp={tp}, num_tokens={n}")
                med = {op: float(rows[f"time_stats.{op}.median"].median()) for op in (*GEMMS, *ELEMENTWISE)}
                times = [_us(med[g]) for g in GEMMS] + [_us(sum(med[e] for e in ELEMENTWISE))]
                lines.append(",".join([gpu, name, str(tp), str(n), *times]))
    return "\n".join(lines) + "\n"


def _all_reduce_table(vidur: Path) -> str:
    import pandas as pd

    lines = _source("network/{a100,h100}_dgx/all_reduce.csv") + [
        "# NCCL all-reduce of `size` fp16 elements inside one DGX node (NVSwitch; devices_per_node == num_workers), "
        "binned by size [size_lo, size_hi) elements",
        "# time_*_us: median and quartiles of the rows' time_stats.all_reduce.median (microseconds); rows: rows in the bin",
        "gpu,num_workers,size_lo,size_hi,rows,size_median,time_median_us,time_p25_us,time_p75_us"]
    for gpu, node in ALL_REDUCE_NODES:
        df = pd.read_csv(vidur / "network" / node / "all_reduce.csv").drop_duplicates(
            subset=["num_workers", "devices_per_node", "size", "time_stats.all_reduce.median"])
        df = df[(df["devices_per_node"] == df["num_workers"]) & (df["collective"] == "all_reduce")]
        for workers in sorted(df["num_workers"].unique()):
            part = df[df["num_workers"] == workers]
            for k in ALL_REDUCE_BINS:
                lo, hi = 2**k, 2 ** (k + 1)
                rows = part[(part["size"] >= lo) & ((part["size"] < hi) | ((k == ALL_REDUCE_BINS[-1]) & (part["size"] == hi)))]
                if not len(rows):
                    continue
                t = rows["time_stats.all_reduce.median"]
                lines.append(f"{gpu},{int(workers)},{lo},{hi},{len(rows)},{int(rows['size'].median())},"
                             f"{_us(t.median())},{_us(t.quantile(0.25))},{_us(t.quantile(0.75))}")
    return "\n".join(lines) + "\n"


def _attention_table(vidur: Path) -> str:
    src = vidur / "compute" / "a100" / "meta-llama" / "Meta-Llama-3-8B" / "attention_rows.csv"
    raw = [line for line in src.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")]
    lines = _source("compute/a100/meta-llama/Meta-Llama-3-8B/attention.csv (a Git LFS object)") + [
        "# FlashInfer paged attention, block 16, TP 1, Meta-Llama-3-8B (32 query, 8 KV heads of 128) on an A100: "
        "medians, microseconds per layer",
        "# rows as read from the public copy of that file in GitHub sw5sh/cs378-assignment3 (the same 9,155,341 bytes); "
        "note: how a row was read",
        "kind,batch,kv_tokens,prefill_tokens,attention_us,kv_cache_save_us,note"]
    for line in raw:
        kind, batch, kv, chunk, dec, pre, save, *note = line.split(",")
        attn = float(dec) if kind == "decode" else float(pre)
        lines.append(f"{kind},{batch},{kv},{chunk},{_us(attn)},{_us(float(save))},{','.join(note)}")
    return "\n".join(lines) + "\n"


def build_vidur_tables(vidur_dir: str | Path, out_dir: str | Path) -> dict[str, Path]:
    """Write :data:`LAYER_FILE`, :data:`ALL_REDUCE_FILE`, :data:`ATTENTION_FILE` and Vidur's licence
    (:data:`LICENSE_FILE`) into ``out_dir`` from the profiles under ``vidur_dir`` (each file written to a
    temporary name, then renamed). About a second.

    Returns:
        name -> path of every file written.

    Raises:
        FileNotFoundError: naming a missing profile; ValueError for a profile without an expected row.
    """
    vidur, out = Path(vidur_dir), Path(out_dir)
    if not (vidur / "LICENSE").is_file():
        raise FileNotFoundError(f"{vidur}: no Vidur profiles here (LICENSE missing)")
    notice = vidur.joinpath("LICENSE").read_text(encoding="utf-8")
    body = "\n".join(line[4:] if line.startswith("    ") else line for line in notice.strip("\n").splitlines())
    texts = {
        LAYER_FILE: _layer_table(vidur), ALL_REDUCE_FILE: _all_reduce_table(vidur),
        ATTENTION_FILE: _attention_table(vidur),
        LICENSE_FILE: (f"# Vidur's licence\n\nThe files `vidur_*.csv` here are derived from Vidur's profiles "
                       f"(GitHub microsoft/vidur, commit {VIDUR_COMMIT}, `data/profiling/`), which carry this "
                       f"notice:\n\n```\n{body}\n```\n"),
    }
    return {name: write_text(out / name, text) for name, text in texts.items()}
