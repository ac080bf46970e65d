"""Fig. 18a: latency of paged vs contiguous decode attention (paper §7.1).

The paper times its paged-attention CUDA kernel against FasterTransformer's kernel over a
contiguous cache (OPT-13B's attention: 40 heads × 128, fp16, every sequence at the same context
length) and finds the paged kernel 20–26% slower. This module measures the same two cases here:

* **GPU**: the Triton paged kernel (:func:`paged.kernels.triton_paged_attention.paged_attention_triton`,
  launched without input checks) vs ``scaled_dot_product_attention`` over a contiguous
  ``[batch, context, kv_heads, head_size]`` cache, both timed with ``triton.testing.do_bench``
  (median). Also the achieved bandwidth of the paged kernel, K/V bytes read ÷ time, against the
  device's peak HBM bandwidth (:data:`PEAK_HBM_GBPS`).
* **CPU**: the engine's CPU kernel, the C kernel that reads keys and values through the block
  tables (:func:`paged.kernels.cpu_kernel.paged_attention_cpu`, on torch's thread count), vs SDPA
  over the contiguous cache; where the C kernel is not built or not measured fast for the shape, the
  torch path (a block-table gather into a reused workspace + SDPA,
  :func:`paged.kernels.paged_attention_torch`). Timed with ``time.perf_counter``, the two
  alternating in bursts of 3 calls over ``repeats`` rounds, the best call of each. These are CPU
  numbers: the cost of paging in a CPU kernel (blocks in random order instead of one stream), not
  the GPU kernel the paper times.

**The kernel's roofline.** Decode attention reads every key and value of the batch once and does
about 2 multiply-adds per element read, far below any GPU's compute ridge, so its floor is the
time to stream its compulsory bytes from HBM (:func:`bytes_per_call`: keys, values, the used
block-table entries, the query and the output) at the datasheet peak (:data:`ROOFLINE_GPUS`). Every
row carries that ideal for the A100-40GB, H100 SXM and H200, on any device; on a GPU it also
carries the measured time as a fraction of its own device's ideal.
"""

from __future__ import annotations

import math
import time

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
import torch

from paged.block.allocator import DEFAULT_BLOCK_SIZE
from paged.experiments.notebook.paper import FIG18A_PAGED_OVER_CONTIGUOUS
from paged.experiments.notebook.plotting import SYSTEM_COLORS, plain_log_ticks
from paged.kernels.cpu_kernel import load_kernel, paged_attention_cpu, plan_cpu_decode
from paged.kernels.reference import contiguous_attention, gather_kv, paged_attention_torch

__all__ = ["PEAK_HBM_GBPS", "ROOFLINE_GPUS", "ROOFLINE_COLUMNS", "PAPER_RATIO", "peak_bandwidth_gbps", "bytes_per_call",
           "roofline", "roofline_table",
           "make_inputs", "measure_point", "compare_launches", "sweep", "plot_fig18a", "paper_comparison", "resolve_device",
           "resolve_dtype"]

#: Peak HBM bandwidth (GB/s, 1e9 bytes/s) by a substring of ``torch.cuda.get_device_name()``;
#: the first match wins (vendor datasheets; SXM parts).
PEAK_HBM_GBPS = {"H200": 4800.0, "H100 PCIe": 2000.0, "H100": 3350.0, "A100-SXM4-80GB": 2039.0,
                 "A100 80GB PCIe": 1935.0, "A100": 1555.0, "L40S": 864.0, "A10G": 600.0, "L4": 300.0,
                 "V100": 900.0}
#: The GPUs every roofline row is computed for: peak HBM bandwidth in GB/s (1e9 bytes/s), from NVIDIA's
#: datasheets: A100 Tensor Core GPU datasheet (A100 40GB: 1,555 GB/s; the paper's GPU), H100 Tensor
#: Core GPU datasheet (H100 SXM: 3.35 TB/s), H200 Tensor Core GPU datasheet (4.8 TB/s).
ROOFLINE_GPUS = {"A100-40GB": 1555.0, "H100 SXM": 3350.0, "H200": 4800.0}
#: The frame column of each roofline GPU's ideal time (µs).
ROOFLINE_COLUMNS = {name: "ideal_us_" + name.lower().replace("-", "_").replace(" ", "_") for name in ROOFLINE_GPUS}
#: The paper's Fig. 18a: paged kernel latency / FasterTransformer's, at context 64–256, batch 8 and 32.
PAPER_RATIO = FIG18A_PAGED_OVER_CONTIGUOUS


def peak_bandwidth_gbps(device_name: str) -> float | None:
    """Peak HBM bandwidth (GB/s) of a GPU by name, or None if it is not in :data:`PEAK_HBM_GBPS`."""
    for key, value in PEAK_HBM_GBPS.items():
        if key in device_name:
            return value
    return None


def bytes_per_call(batch: int, context_len: int, num_heads: int, num_kv_heads: int, head_size: int,
                   block_size: int, element_size: int) -> dict[str, int]:
    """Compulsory HBM traffic of one paged decode-attention call (every sequence at ``context_len``).

    Returns:
        bytes: ``kv_bytes`` (keys and values: ``2 × batch × context_len × num_kv_heads × head_size ×
        element_size``), ``table_bytes`` (the used int32 block-table entries and context lengths;
        each program re-reads its sequence's entries, from L2 after the first), ``io_bytes`` (query
        read + output written), and ``total_bytes``. Split-K's partial results (a round trip of
        ``batch × num_heads × partitions × (head_size + 2)`` fp32 values) are not compulsory and not counted.
    """
    kv = 2 * batch * context_len * num_kv_heads * head_size * element_size
    table = 4 * batch * (math.ceil(context_len / block_size) + 1)
    io = 2 * batch * num_heads * head_size * element_size
    return {"kv_bytes": kv, "table_bytes": table, "io_bytes": io, "total_bytes": kv + table + io}


def roofline(total_bytes: int) -> dict[str, float]:
    """Ideal time (µs) to move ``total_bytes`` at each :data:`ROOFLINE_GPUS` peak, keyed by :data:`ROOFLINE_COLUMNS`."""
    return {ROOFLINE_COLUMNS[name]: total_bytes / (gbps * 1e9) * 1e6 for name, gbps in ROOFLINE_GPUS.items()}


def roofline_table(context_lens, batch_sizes, *, num_heads: int = 40, num_kv_heads: int = 40, head_size: int = 128,
                   block_size: int = DEFAULT_BLOCK_SIZE, dtype: str = "float16") -> pd.DataFrame:
    """The roofline of every (batch, context length) point, measured or not (defaults: OPT-13B, fp16).

    Returns:
        one row per point: ``batch``, ``context_len``, the :func:`bytes_per_call` fields and the
        :func:`roofline` columns (µs).

    Raises:
        ValueError: an unknown dtype name.
    """
    element = torch.empty((), dtype=resolve_dtype(dtype, torch.device("cuda"))).element_size()
    rows = []
    for batch in batch_sizes:
        for context_len in context_lens:
            traffic = bytes_per_call(batch, context_len, num_heads, num_kv_heads, head_size, block_size, element)
            rows.append({"batch": batch, "context_len": context_len, **traffic, **roofline(traffic["total_bytes"])})
    return pd.DataFrame(rows)


def resolve_device(device: str) -> torch.device:
    """``"auto"`` → CUDA if available, else CPU; otherwise ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.

    Raises:
        ValueError: any other device string, or ``"cuda"`` on a machine without CUDA.
    """
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device != "cpu" and not (device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit())):
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    if device != "cpu" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} asked for, but torch sees no CUDA device here; use 'cpu' or 'auto'")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """``"auto"`` → fp16 on CUDA (the paper's), fp32 on CPU (CPU fp16 matmuls are slow); else by name.

    Raises:
        ValueError: on an unknown name.
    """
    if dtype == "auto":
        return torch.float16 if device.type == "cuda" else torch.float32
    names = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    if dtype not in names:
        raise ValueError(f"dtype must be 'auto' or one of {sorted(names)}, got {dtype!r}")
    return names[dtype]


def make_inputs(batch: int, context_len: int, num_heads: int, num_kv_heads: int, head_size: int,
                block_size: int, dtype: torch.dtype, device: torch.device, seed: int = 0) -> dict:
    """One decode step's inputs in both layouts, holding the same keys and values.

    Every sequence has ``context_len`` tokens. Paged: caches of exactly the blocks needed, handed
    out in a random order (as after a long run of allocations and frees), and int32 block tables.
    Contiguous: ``[batch, context_len, num_kv_heads, head_size]`` key and value tensors.

    Returns:
        dict with ``query``, ``key_cache``, ``value_cache``, ``block_tables``, ``context_lens``,
        ``key``, ``value``, ``scale``.
    """
    # Drawn on the target device (a GPU fills 10 GB of cache in milliseconds; a CPU would take
    # seconds and a host copy); on the CPU in fp32 then cast, as always.
    gen = torch.Generator(device=device).manual_seed(seed)
    draw = dtype if device.type == "cuda" else torch.float32
    blocks_per_seq = math.ceil(context_len / block_size)
    num_blocks = batch * blocks_per_seq
    shape = (num_blocks, block_size, num_kv_heads, head_size)
    key_cache = torch.randn(shape, generator=gen, device=device, dtype=draw).to(dtype)
    value_cache = torch.randn(shape, generator=gen, device=device, dtype=draw).to(dtype)
    block_tables = torch.randperm(num_blocks, generator=gen, device=device).view(batch, blocks_per_seq)
    block_tables = block_tables.to(torch.int32)
    context_lens = torch.full((batch,), context_len, dtype=torch.int32, device=device)
    key, value = gather_kv(key_cache, value_cache, block_tables, context_lens, context_len)
    query = torch.randn(batch, num_heads, head_size, generator=gen, device=device, dtype=draw).to(dtype)
    return {"query": query, "key_cache": key_cache, "value_cache": value_cache, "block_tables": block_tables,
            "context_lens": context_lens, "key": key.contiguous(), "value": value.contiguous(),
            "scale": head_size ** -0.5}


def _time_cpu_interleaved(paged, contiguous, repeats: int, burst: int = 3) -> tuple[float, float]:
    """Best call of each (ms) over ``repeats`` rounds; a round runs ``burst`` calls of one, then
    ``burst`` of the other, after two warm-up calls each, so a burst of load on a shared CPU falls on
    both. Not call by call: after SDPA returns, torch's OpenMP workers keep spinning for a while and
    take the core the C kernel's second thread needs (on 2 cores, batch 8 × 64 tokens: 0.99 ms a
    call alternating call by call, 0.59 ms in bursts, 0.63 ms with no SDPA calls between)."""
    for _ in range(2):
        paged(), contiguous()
    times = ([], [])
    for _ in range(repeats):
        for fn, out in ((paged, times[0]), (contiguous, times[1])):
            for _ in range(burst):
                start = time.perf_counter()
                fn()
                out.append(time.perf_counter() - start)
    return min(times[0]) * 1e3, min(times[1]) * 1e3


def _time_cuda_ms(fn, repeats: int) -> float:
    import triton.testing

    return triton.testing.do_bench(fn, warmup=max(5, repeats), rep=max(25, 5 * repeats), return_mode="median")


def measure_point(batch: int, context_len: int, *, num_heads: int = 40, num_kv_heads: int = 40,
                  head_size: int = 128, block_size: int = DEFAULT_BLOCK_SIZE, dtype: torch.dtype = torch.float32,
                  device: torch.device = torch.device("cpu"), repeats: int = 5) -> dict:
    """Time paged and contiguous attention at one (batch, context length) point.

    Returns:
        one row: ``batch``, ``context_len`` (tokens), ``paged_us``, ``contiguous_us``
        (microseconds; GPU: do_bench median, CPU: the best call of ``repeats`` rounds of 3), ``ratio``
        (paged / contiguous), the :func:`bytes_per_call` fields, the :func:`roofline` columns,
        ``paged_gbps`` (total_bytes / paged time, GB/s), ``peak_gbps``, ``ideal_us`` (total_bytes at
        that peak) and ``fraction_of_peak`` (= ideal_us / paged_us; GPU with a known peak, else NaN),
        ``paged_impl``, ``contiguous_impl``, ``device`` (name).
    """
    x = make_inputs(batch, context_len, num_heads, num_kv_heads, head_size, block_size, dtype, device)
    q, kc, vc, bt, cl, scale = (x[k] for k in ("query", "key_cache", "value_cache", "block_tables",
                                                "context_lens", "scale"))
    k, v = x["key"], x["value"]
    contiguous = lambda: contiguous_attention(q, k, v, None, scale)  # noqa: E731
    if device.type == "cuda":
        from paged.kernels.triton_paged_attention import paged_attention_triton

        paged = lambda: paged_attention_triton(q, kc, vc, bt, cl, scale)  # noqa: E731
        paged_ms, contiguous_ms = _time_cuda_ms(paged, repeats), _time_cuda_ms(contiguous, repeats)
        name = torch.cuda.get_device_name(device)
        impls = ("triton paged kernel", "torch SDPA, contiguous cache")
        peak = peak_bandwidth_gbps(name)
    else:
        threads = torch.get_num_threads()
        kernel = load_kernel()
        if kernel is not None and kernel.fast(q.dtype, head_size):  # the engine's CPU path
            plan = plan_cpu_decode(kernel, bt, cl, block_size, num_threads=threads)
            paged = lambda: paged_attention_cpu(q, kc, vc, plan, scale)  # noqa: E731
            impls = (f"C paged kernel ({kernel.code(q.dtype, head_size)}, CPU)", "torch SDPA, contiguous cache (CPU)")
        else:
            padded = (batch, kc.shape[0] // batch * block_size, num_kv_heads, head_size)
            workspace = (kc.new_empty(padded), vc.new_empty(padded))  # the gather's target, reused
            paged = lambda: paged_attention_torch(q, kc, vc, bt, cl, scale, context_len, workspace)  # noqa: E731
            impls = ("torch gather + SDPA (CPU)", "torch SDPA, contiguous cache (CPU)")
        paged_ms, contiguous_ms = _time_cpu_interleaved(paged, contiguous, repeats)
        name = f"CPU ({threads} thread{'s' if threads > 1 else ''})"
        peak = None
    traffic = bytes_per_call(batch, context_len, num_heads, num_kv_heads, head_size, block_size, q.element_size())
    paged_gbps = traffic["total_bytes"] / (paged_ms * 1e-3) / 1e9
    nan = float("nan")
    return {"batch": batch, "context_len": context_len, "paged_us": paged_ms * 1e3,
            "contiguous_us": contiguous_ms * 1e3, "ratio": paged_ms / contiguous_ms, **traffic,
            **roofline(traffic["total_bytes"]), "paged_gbps": paged_gbps, "peak_gbps": peak if peak else nan,
            "ideal_us": traffic["total_bytes"] / (peak * 1e9) * 1e6 if peak else nan,
            "fraction_of_peak": paged_gbps / peak if peak else nan,
            "paged_impl": impls[0], "contiguous_impl": impls[1], "device": name}


def compare_launches(batch: int, context_len: int, variants: dict[str, dict], *, num_heads: int = 40,
                     num_kv_heads: int = 40, head_size: int = 128, block_size: int = DEFAULT_BLOCK_SIZE,
                     dtype: torch.dtype = torch.float16, device: torch.device | None = None,
                     repeats: int = 5) -> dict[str, float]:
    """GPU only: the Triton paged kernel's latency (µs, do_bench median) under each named set of
    launcher keywords (``split_k``, ``config``, ``partition_size``) on one shared set of inputs.

    Used to check on a real GPU what the CPU cannot: whether split-K pays at long contexts and
    whether the elementwise group-of-one path beats the padded ``tl.dot``.

    Raises:
        ValueError: ``device`` is not a CUDA device.
    """
    device = device or torch.device("cuda")
    if device.type != "cuda":
        raise ValueError(f"compare_launches times the compiled Triton kernel and needs a CUDA device, got {device}")
    from paged.kernels.triton_paged_attention import paged_attention_triton

    x = make_inputs(batch, context_len, num_heads, num_kv_heads, head_size, block_size, dtype, device)
    args = (x["query"], x["key_cache"], x["value_cache"], x["block_tables"], x["context_lens"], x["scale"])
    return {name: _time_cuda_ms(lambda kw=kw: paged_attention_triton(*args, **kw), repeats) * 1e3
            for name, kw in variants.items()}


def sweep(context_lens, batch_sizes, *, num_heads: int = 40, num_kv_heads: int = 40, head_size: int = 128,
          block_size: int = DEFAULT_BLOCK_SIZE, dtype: str = "auto", device: str = "auto", repeats: int = 5,
          max_kv_bytes: int | None = None, progress: bool = False) -> pd.DataFrame:
    """Every (batch, context length) point of Fig. 18a as a table (rows of :func:`measure_point`).

    Args:
        context_lens, batch_sizes: the grid (tokens, sequences).
        num_heads, num_kv_heads, head_size: the attention shape (OPT-13B: 40, 40, 128).
        block_size: tokens per KV block (the paper's default 16).
        dtype, device: names, or ``"auto"`` (see :func:`resolve_dtype`, :func:`resolve_device`).
        repeats: timed calls per point (CPU) or the scale of do_bench's warm-up/rep windows (GPU).
        max_kv_bytes: skip points whose K/V exceed this many bytes (keeps CPU runs short); the
            skipped points are listed in ``DataFrame.attrs["skipped"]``.
        progress: print each row as it is measured.

    Raises:
        ValueError: on an empty grid, a grid whose every point exceeds ``max_kv_bytes``, a
            non-positive size, or ``num_heads`` not a multiple of
            ``num_kv_heads`` (GQA / MQA groups query heads over KV heads).
    """
    if not context_lens or not batch_sizes:
        raise ValueError("context_lens and batch_sizes must be non-empty")
    if min(context_lens) < 1 or min(batch_sizes) < 1 or repeats < 1:
        raise ValueError("context lengths, batch sizes and repeats must be ≥ 1")
    if min(num_heads, num_kv_heads, head_size, block_size) < 1:
        raise ValueError(f"num_heads, num_kv_heads, head_size and block_size must be ≥ 1, got "
                         f"{num_heads}, {num_kv_heads}, {head_size}, {block_size}")
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads={num_heads} must be a multiple of num_kv_heads={num_kv_heads}")
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    element = torch.empty((), dtype=torch_dtype).element_size()
    rows, skipped = [], []
    for batch in batch_sizes:
        for context_len in context_lens:
            kv_bytes = bytes_per_call(batch, context_len, num_heads, num_kv_heads, head_size, block_size,
                                      element)["kv_bytes"]
            if max_kv_bytes is not None and kv_bytes > max_kv_bytes:
                skipped.append((batch, context_len))
                continue
            row = measure_point(batch, context_len, num_heads=num_heads, num_kv_heads=num_kv_heads,
                                head_size=head_size, block_size=block_size, dtype=torch_dtype, device=dev,
                                repeats=repeats)
            row["dtype"] = str(torch_dtype).removeprefix("torch.")
            rows.append(row)
            if progress:
                print(f"batch {batch:>3}  context {context_len:>6}  paged {row['paged_us']:>10.1f} µs  "
                      f"contiguous {row['contiguous_us']:>10.1f} µs  ratio {row['ratio']:.2f}", flush=True)
    if not rows:
        raise ValueError(f"every point's K/V exceeds max_kv_bytes={max_kv_bytes}: nothing to measure "
                         f"(smaller context lengths or batch sizes)")
    frame = pd.DataFrame(rows)
    frame.attrs["skipped"] = skipped
    return frame


def plot_fig18a(frame: pd.DataFrame):
    """Fig. 18a: latency per point (left) and the paged/contiguous ratio with the paper's band (right).

    Each panel's legend stands to its right, outside the axes, so it covers no line whatever the
    measured latencies are."""
    long = frame.melt(id_vars=["batch", "context_len"], value_vars=["paged_us", "contiguous_us"],
                      var_name="cache", value_name="latency_us")
    long["cache"] = long["cache"].map({"paged_us": "paged", "contiguous_us": "contiguous"})
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 3.8))
    sns.lineplot(data=long, x="context_len", y="latency_us", hue="cache", style="batch", markers=True,
                 palette={"paged": SYSTEM_COLORS["paged"], "contiguous": SYSTEM_COLORS["fastertransformer"]},
                 ax=left)
    if frame["ideal_us"].notna().any():  # GPU with a known peak: its HBM roofline per batch size
        for i, (_, part) in enumerate(frame.groupby("batch")):
            left.plot(part["context_len"], part["ideal_us"], ls=":", color="grey",
                      label="HBM roofline" if i == 0 else None)
        left.legend()
    sns.move_legend(left, "upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, frameon=False)
    left.set(xscale="log", yscale="log", xlabel="context length (tokens)", ylabel="latency (µs)")
    sns.lineplot(data=frame, x="context_len", y="ratio", hue="batch", marker="o", palette="colorblind", ax=right)
    right.axhspan(*PAPER_RATIO, color="grey", alpha=0.25, label="paper (A100, CUDA): 1.20–1.26")
    right.axhline(1.0, color="black", lw=0.8)
    right.set(xscale="log", xlabel="context length (tokens)", ylabel="paged / contiguous latency")
    right.legend(title="batch", fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    for axis in (left.xaxis, left.yaxis, right.xaxis):
        plain_log_ticks(axis)
    fig.tight_layout()
    return fig


def paper_comparison(frame: pd.DataFrame, paper_contexts=(64, 128, 256), paper_batches=(8, 32)) -> pd.DataFrame:
    """Paper vs this run at the paper's points (context 64/128/256 × batch 8/32) present in ``frame``.

    Returns one row per point plus a ``range`` row: ``paper ratio`` (the 1.20–1.26 band) and
    ``this run ratio`` (paged / contiguous), ``device`` and ``implementation``.
    """
    at = frame[frame["context_len"].isin(paper_contexts) & frame["batch"].isin(paper_batches)]
    band = f"{PAPER_RATIO[0]:.2f}–{PAPER_RATIO[1]:.2f}"
    rows = [{"batch": int(r.batch), "context_len": int(r.context_len), "paper ratio": band,
             "this run ratio": f"{r.ratio:.2f}", "device": r.device, "implementation": r.paged_impl}
            for r in at.itertuples()]
    if len(at):
        rows.append({"batch": "all", "context_len": "all", "paper ratio": band,
                     "this run ratio": f"{at['ratio'].min():.2f}–{at['ratio'].max():.2f}",
                     "device": at["device"].iloc[0], "implementation": at["paged_impl"].iloc[0]})
    return pd.DataFrame(rows)
