"""Optional autotuning of the decode kernel's launch parameters on a real GPU, cached in JSON.

The launch table (:func:`paged.kernels.launch_config.decode_config`) is chosen by the ahead-of-time
compile check, which sees registers and spills but not time. On a GPU, :func:`autotune` times the
table's entry and its neighbours (:func:`~paged.kernels.launch_config.candidate_configs`) for a
few shapes, rejects every candidate the CUDA driver reports spilling or above
:data:`~paged.kernels.launch_config.MAX_REGISTERS`, and writes the fastest per shape to a JSON
file; :func:`paged.kernels.launch_config.use_tuned_configs` installs such a file for the process.
Nothing here runs in the tests (it needs CUDA); ``make gpu-check --autotune`` calls it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from paged.block.allocator import DEFAULT_BLOCK_SIZE
from paged.kernels.launch_config import MAX_REGISTERS, candidate_configs, tuned_key

__all__ = ["TuneShape", "DEFAULT_TUNE_SHAPES", "autotune"]


@dataclass(frozen=True)
class TuneShape:
    """One decode call to tune for: attention shape, dtype and the batch/context it is timed at."""

    num_heads: int
    num_kv_heads: int
    head_size: int
    block_size: int = DEFAULT_BLOCK_SIZE
    dtype: str = "float16"
    batch: int = 32
    context_len: int = 4096


#: OPT-13B (no GQA: the elementwise path) and a GQA shape (32 heads over 8, as Llama-3-8B: tl.dot).
DEFAULT_TUNE_SHAPES = (TuneShape(40, 40, 128), TuneShape(32, 8, 128))


def _inputs(shape: TuneShape, device: torch.device):
    dtype = getattr(torch, shape.dtype)
    gen = torch.Generator(device=device).manual_seed(0)
    blocks = -(-shape.context_len // shape.block_size)
    cache = (shape.batch * blocks, shape.block_size, shape.num_kv_heads, shape.head_size)
    key = torch.randn(cache, generator=gen, device=device, dtype=dtype)
    value = torch.randn(cache, generator=gen, device=device, dtype=dtype)
    tables = torch.randperm(shape.batch * blocks, generator=gen, device=device).view(shape.batch, blocks).int()
    lens = torch.full((shape.batch,), shape.context_len, dtype=torch.int32, device=device)
    query = torch.randn(shape.batch, shape.num_heads, shape.head_size, generator=gen, device=device, dtype=dtype)
    return query, key, value, tables, lens, shape.head_size ** -0.5


def autotune(cache_path: str | Path, shapes=DEFAULT_TUNE_SHAPES, repeats: int = 5) -> dict:
    """Time every candidate launch config of each shape on the current CUDA device; cache the fastest.

    Args:
        cache_path: JSON file to write (``{"device", "capability", "entries": [...]}``).
        shapes: :class:`TuneShape` values.
        repeats: scale of ``triton.testing.do_bench``'s warm-up and rep windows (ms).

    Returns:
        what was written. Each entry: the shape, the table's config and time (µs), the fastest
        accepted config and time, and the rejected configs with the driver's registers/spills.
        Cost: about 1 s per candidate (compile + timing), 20-30 candidates per shape.

    Raises:
        ValueError: no CUDA device.
    """
    import triton.testing

    from paged.kernels.triton_paged_attention import plan_paged_attention

    if not torch.cuda.is_available():
        raise ValueError("autotune times the compiled kernel and needs a CUDA GPU")
    device = torch.device("cuda")
    major, minor = torch.cuda.get_device_capability(device)
    capability = 10 * major + minor
    entries = []
    for shape in shapes:
        args = _inputs(shape, device)
        element = args[0].element_size()
        group = shape.num_heads // shape.num_kv_heads
        timed, rejected = [], []
        for config in candidate_configs(shape.head_size, group, element, capability):
            _, launches = plan_paged_attention(*args, split_k=False, config=config)
            try:
                compiled = launches[0].run()
            except Exception as error:  # e.g. triton's OutOfResources (shared memory) for a large tile
                rejected.append({**config.as_dict(), "error": f"{type(error).__name__}: {error}"[:200]})
                continue
            if compiled.n_spills or compiled.n_regs > MAX_REGISTERS:
                rejected.append({**config.as_dict(), "registers": compiled.n_regs, "spills": compiled.n_spills})
                continue

            def call(launches=launches):
                for launch in launches:
                    launch.run()

            ms = triton.testing.do_bench(call, warmup=max(5, repeats), rep=max(25, 5 * repeats), return_mode="median")
            timed.append((ms * 1e3, config))
        base = candidate_configs(shape.head_size, group, element, capability)[0]
        table_us = next((us for us, config in timed if config == base), float("nan"))
        best_us, best = min(timed, key=lambda item: item[0]) if timed else (float("nan"), None)
        entries.append({"shape": shape.__dict__, "key": tuned_key(capability, shape.head_size, group, element),
                        "table": base.as_dict(), "table_us": table_us, "best": best.as_dict() if best else None,
                        "best_us": best_us, "rejected": rejected})
        print(f"   {shape}: table {table_us:.1f} µs, best {best_us:.1f} µs with {best}; "
              f"{len(rejected)} rejected (spills or > {MAX_REGISTERS} registers)", flush=True)
        del args
    result = {"device": torch.cuda.get_device_name(device), "capability": capability, "entries": entries}
    Path(cache_path).write_text(json.dumps(result, indent=1))
    return result
