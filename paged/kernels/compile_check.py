"""Ahead-of-time compile and resource check of the Triton paged-attention kernels (no GPU needed).

Triton compiles for a named GPU without one being present: :func:`triton.compile` on an
``ASTSource`` with ``GPUTarget("cuda", 80, 32)`` runs the whole pipeline (TTIR → TTGIR → LLVM →
PTX → ``ptxas`` → cubin), and ``cuobjdump --dump-resource-usage`` (shipped in the triton wheel)
reads the cubin's registers, stack and local memory per thread. This module does that for the
launches the launcher really makes:

* :func:`shape_launches` builds tiny CPU tensors of one :class:`KernelShape` and asks
  :func:`paged.kernels.triton_paged_attention.plan_paged_attention` for its launches, so the
  tile, ``num_warps``, ``num_stages`` and constexprs are the launcher's own;
* :func:`compile_key` derives the signature, constexprs and specialisation attributes with
  Triton's own argument binder (the one its JIT uses at launch), so the compiled variant is the
  one a GPU would run. The integers the kernel does not specialise on (group size, block-table
  stride, partition count) do not change it, and every other integer is a multiple of the head
  size (hence of 16), which the launcher enforces; so one compile per distinct key covers every
  batch size, context length and number of KV heads of a shape;
* :func:`check` compiles each distinct key once (compiles are deterministic in the key) and
  reports per shape: registers, stack and local bytes per thread, shared memory, and the
  occupancy they allow (:func:`occupancy`).

Compiling needs the compiled (non-interpreted) kernels: in a process started with
``TRITON_INTERPRET=1`` use :func:`check_in_subprocess`. Cost: about 0.3 s of one CPU core per
distinct key (Triton 3.9).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass

import torch

__all__ = ["GpuArch", "ARCHS", "KernelShape", "ResourceUsage", "HEAD_SIZES", "BLOCK_SIZES", "QUERY_GROUPS",
           "grid_shapes", "missing_tools", "shape_launches", "compile_key", "compile_usage", "occupancy",
           "violations", "check", "check_in_subprocess", "compiled_variants"]

_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


@dataclass(frozen=True)
class GpuArch:
    """Per-SM limits of one compute capability (CUDA C Programming Guide, "Compute Capabilities",
    technical specifications table; register allocation in units of 256 per warp and 1 KiB of shared
    memory reserved per block, from NVIDIA's occupancy calculator).

    Attributes:
        name: ``"sm_80"``; capability: 80; example: a GPU of this capability.
        registers: 32-bit registers per SM; max_warps: resident warps per SM; max_blocks: resident
            blocks per SM; shared_bytes: shared memory per SM usable by blocks (bytes).
    """

    name: str
    capability: int
    example: str
    registers: int = 65536
    max_warps: int = 64
    max_blocks: int = 32
    shared_bytes: int = 164 * 1024


#: The architectures the check compiles for: A100 (sm_80) and H100/H200 (sm_90).
ARCHS = {"sm_80": GpuArch("sm_80", 80, "A100", shared_bytes=164 * 1024),
         "sm_90": GpuArch("sm_90", 90, "H100/H200", shared_bytes=228 * 1024)}


@dataclass(frozen=True)
class KernelShape:
    """One attention shape as the launcher sees it (the batch size and context length do not matter)."""

    dtype: str  # "float16", "bfloat16" or "float32"
    head_size: int
    block_size: int
    queries_per_kv: int
    split_k: bool


#: The grid the check covers (the launch table's shapes): head sizes (32 is the shipped small model's), tokens per
#: block, query heads per KV head (1 = no GQA, e.g. OPT-13B; 5 is not a power of two).
HEAD_SIZES = (32, 64, 80, 96, 128, 256)
BLOCK_SIZES = (8, 16, 32)
QUERY_GROUPS = (1, 4, 5, 8)


def grid_shapes(dtype: str, head_sizes=HEAD_SIZES, block_sizes=BLOCK_SIZES, groups=QUERY_GROUPS) -> list[KernelShape]:
    """Every (head size, block size, group, split-K on/off) shape of one dtype."""
    return [KernelShape(dtype, h, b, g, s) for h in head_sizes for b in block_sizes for g in groups
            for s in (False, True)]


@dataclass(frozen=True)
class ResourceUsage:
    """What ``cuobjdump --dump-resource-usage`` and Triton's metadata say about one cubin.

    Attributes:
        registers, stack_bytes, local_bytes: per thread (stack/local > 0 means spills).
        shared_bytes: shared memory per program (Triton's dynamic allocation + static).
        compile_seconds: wall time of the compile (0 when it came from this run's cache).
    """

    registers: int
    stack_bytes: int
    local_bytes: int
    shared_bytes: int
    compile_seconds: float


def missing_tools() -> str | None:
    """Why this triton wheel cannot compile for NVIDIA GPUs here (None when it can)."""
    try:
        from triton import knobs
        from triton.backends.compiler import GPUTarget  # noqa: F401
        from triton.compiler import make_backend  # noqa: F401

        tools = {"ptxas": knobs.nvidia.ptxas, "cuobjdump": knobs.nvidia.cuobjdump}
    except Exception as error:  # an old or CPU-only triton
        return f"triton's NVIDIA backend is not importable ({type(error).__name__}: {error})"
    absent = [name for name, tool in tools.items() if tool is None or not os.path.exists(tool.path)]
    if absent:
        return f"the triton wheel's compiler tools are absent ({', '.join(absent)} not found)"
    return None


def shape_launches(shape: KernelShape, arch: GpuArch) -> list:
    """The launches (:class:`~paged.kernels.triton_paged_attention.KernelLaunch`) the launcher makes
    for ``shape`` on a GPU of ``arch``, built on tiny CPU tensors (2 KV heads, one sequence of two blocks)."""
    from paged.kernels import triton_paged_attention as kernel

    dtype = _DTYPES[shape.dtype]
    kv_heads = 2
    query = torch.zeros(1, kv_heads * shape.queries_per_kv, shape.head_size, dtype=dtype)
    cache = torch.zeros(2, shape.block_size, kv_heads, shape.head_size, dtype=dtype)
    tables = torch.zeros(1, 2, dtype=torch.int32)
    lens = torch.ones(1, dtype=torch.int32)
    _, launches = kernel.plan_paged_attention(
        query, cache, cache, tables, lens, shape.head_size ** -0.5, split_k=shape.split_k,
        capability=arch.capability)
    return launches


def compile_key(launch, arch: GpuArch) -> tuple:
    """``(fn, signature, constexprs, attrs, options)`` of ``launch`` for ``arch``, as Triton's JIT
    would build them at launch time (its own argument binder), hashable as ``repr``."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    fn = launch.kernel
    backend = make_backend(GPUTarget("cuda", arch.capability, 32))
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, specialization, _ = binder(*launch.args, **launch.constexprs)
    options, signature, constexprs, attrs = fn._pack_args(
        backend, {"num_warps": launch.config.num_warps, "num_stages": launch.config.num_stages},
        bound, specialization, {})
    return fn, signature, constexprs, attrs, {"num_warps": options.num_warps, "num_stages": options.num_stages}


def _parse_resource_usage(text: str) -> dict[str, int]:
    for line in text.splitlines():
        if "REG:" in line:
            fields = dict(item.split(":", 1) for item in line.split() if ":" in item)
            return {key: int(fields[key]) for key in ("REG", "STACK", "LOCAL", "SHARED")}
    raise RuntimeError(f"cuobjdump printed no resource usage:\n{text}")


def compile_usage(key: tuple, arch: GpuArch) -> ResourceUsage:
    """Compile one key for ``arch`` and read its resources (about 0.3 s of CPU).

    Raises:
        triton.compiler.errors.CompilationError, PTXASError: the kernel does not compile.
        RuntimeError: cuobjdump fails or reports nothing.
    """
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn, signature, constexprs, attrs, options = key
    start = time.perf_counter()
    compiled = triton.compile(ASTSource(fn, signature, constexprs, attrs),
                              target=GPUTarget("cuda", arch.capability, 32), options=options)
    seconds = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(compiled.asm["cubin"])
        result = subprocess.run([knobs.nvidia.cuobjdump.path, "--dump-resource-usage", path],
                                capture_output=True, text=True, check=True)
    usage = _parse_resource_usage(result.stdout)
    return ResourceUsage(usage["REG"], usage["STACK"], usage["LOCAL"], compiled.metadata.shared + usage["SHARED"],
                         seconds)


def occupancy(usage: ResourceUsage, num_warps: int, arch: GpuArch) -> dict:
    """Resident programs and warps per SM that ``usage`` allows, and what limits them.

    Returns:
        ``{"programs": int, "warps": int, "fraction": warps / max_warps, "limit": "registers" |
        "shared" | "warps"}``.
    """
    per_warp = -(-usage.registers * 32 // 256) * 256  # registers are allocated per warp in units of 256
    limits = {"registers": arch.registers // (per_warp * num_warps),
              "shared": arch.shared_bytes // (usage.shared_bytes + 1024),
              "warps": min(arch.max_warps // num_warps, arch.max_blocks)}
    limit = min(limits, key=limits.get)
    programs = limits[limit]
    return {"programs": programs, "warps": programs * num_warps, "fraction": programs * num_warps / arch.max_warps,
            "limit": limit}


def violations(row: dict) -> list[str]:
    """What is wrong with one :func:`check` row: stack or local memory (spills), registers above
    :data:`~paged.kernels.launch_config.MAX_REGISTERS`, fewer than
    :data:`~paged.kernels.launch_config.MIN_WARPS_PER_SM` resident warps. Empty when it passes."""
    from paged.kernels.launch_config import MAX_REGISTERS, MIN_WARPS_PER_SM

    found = []
    if row["stack_bytes"] or row["local_bytes"]:
        found.append(f"stack {row['stack_bytes']} B, local {row['local_bytes']} B per thread (spills)")
    if row["registers"] > MAX_REGISTERS:
        found.append(f"{row['registers']} registers > {MAX_REGISTERS}")
    if row["warps"] < MIN_WARPS_PER_SM:
        found.append(f"{row['warps']} resident warps per SM < {MIN_WARPS_PER_SM} (limited by {row['limit']})")
    return found


def check(shapes: list[KernelShape], archs: list[str]) -> tuple[list[dict], dict]:
    """Compile every launch of every shape for every arch; each distinct key once.

    Returns:
        ``(rows, stats)``: one row per (arch, shape, kernel) with the shape's fields, ``kernel``
        (``"decode"``/``"reduce"``), the launch config, the :class:`ResourceUsage` fields and
        :func:`occupancy`; ``stats`` = ``{"launches", "compiles", "seconds"}``.

    Raises:
        RuntimeError: the kernels are interpreted in this process (use :func:`check_in_subprocess`),
            or the compiler tools are missing.
    """
    from paged.kernels import triton_paged_attention as kernel

    if kernel.INTERPRETED:
        raise RuntimeError("the kernels were imported under TRITON_INTERPRET=1; use check_in_subprocess")
    if (why := missing_tools()) is not None:
        raise RuntimeError(why)
    cache: dict[str, ResourceUsage] = {}
    rows = []
    start = time.perf_counter()
    launches = 0
    for arch_name in archs:
        arch = ARCHS[arch_name]
        for shape in shapes:
            for launch in shape_launches(shape, arch):
                key = compile_key(launch, arch)
                text = repr((arch.name, key[0].__name__, key[1:]))
                if text not in cache:
                    cache[text] = compile_usage(key, arch)
                usage = cache[text]
                launches += 1
                rows.append({"arch": arch.name, **asdict(shape),
                             "kernel": "reduce" if "reduce" in key[0].__name__ else "decode",
                             **launch.config.as_dict(), **asdict(usage),
                             **occupancy(usage, launch.config.num_warps, arch)})
    return rows, {"launches": launches, "compiles": len(cache), "seconds": time.perf_counter() - start}


def check_in_subprocess(shapes: list[KernelShape], archs: list[str], cache_dir: str | None = None,
                        timeout: float = 900) -> tuple[list[dict], dict]:
    """:func:`check` in a fresh Python with ``TRITON_INTERPRET=0`` (for interpreter processes, e.g. tests).

    Args:
        cache_dir: Triton's compile cache for the worker (``TRITON_CACHE_DIR``); None keeps the
            user's (``~/.triton/cache``, where a repeated check costs seconds instead of minutes).

    Raises:
        RuntimeError: the worker failed; its stderr is in the message.
    """
    payload = json.dumps({"shapes": [asdict(s) for s in shapes], "archs": archs})
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9's default, stated to silence its warning
    if cache_dir is not None:
        env["TRITON_CACHE_DIR"] = str(cache_dir)
    result = subprocess.run([sys.executable, "-m", "paged.kernels.compile_check"], input=payload, env=env,
                            capture_output=True, text=True, timeout=timeout)
    if result.returncode:
        raise RuntimeError(f"compile check worker failed (exit {result.returncode}):\n{result.stderr[-4000:]}")
    answer = json.loads(result.stdout)
    return answer["rows"], answer["stats"]


def compiled_variants() -> list[dict]:
    """Every variant Triton's JIT has compiled and loaded in this process (GPU only; empty in the
    interpreter), with the resources the CUDA driver reports: the runtime side of
    this module's check.

    Returns:
        one dict per variant: ``kernel``, ``device``, ``num_warps``, ``num_stages``, ``registers``
        and ``spills`` (driver: ``n_regs``, ``n_spills``), ``shared_bytes``, ``constexprs``.
    """
    from paged.kernels import triton_paged_attention as kernel

    if kernel.INTERPRETED:
        return []
    found = []
    for fn in (kernel.paged_attention_decode_kernel, kernel.paged_attention_reduce_kernel):
        for device, (cache, *_rest) in list(fn.device_caches.items()):
            for compiled in cache.values():
                names = fn.arg_names
                constants = {names[k[0]]: v for k, v in compiled.src.constants.items() if len(k) == 1}
                found.append({"kernel": fn.__name__.strip("_"), "device": device,
                              "num_warps": compiled.metadata.num_warps, "num_stages": compiled.metadata.num_stages,
                              "registers": getattr(compiled, "n_regs", None), "spills": getattr(compiled, "n_spills", None),
                              "shared_bytes": compiled.metadata.shared,
                              "constexprs": {k: v for k, v in constants.items() if k.isupper()}})
    return found


def _worker() -> None:
    """Read ``{"shapes": [...], "archs": [...]}`` on stdin, print ``{"rows", "stats"}`` on stdout."""
    request = json.load(sys.stdin)
    rows, stats = check([KernelShape(**s) for s in request["shapes"]], request["archs"])
    json.dump({"rows": rows, "stats": stats}, sys.stdout)


if __name__ == "__main__":
    _worker()
