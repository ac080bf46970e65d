"""The C decode kernel for CPUs: read keys and values through the block tables, no gather (§4.1, §5.1).

:func:`paged_attention_cpu` runs ``paged_attention_cpu.c`` (package data beside this module; its
header says how it computes): one query token per sequence attends to its context straight from
the paged cache ``[num_blocks, block_size, num_kv_heads, head_size]``, a block at a time as the
block table lists them, with an online softmax. Nothing is copied first, which is what makes it
faster than :mod:`paged.kernels.bucketed` (whose gather alone costs about as much as SDPA's pass).

Building: on first use :func:`load_kernel` compiles the source with the system C compiler
(:func:`compiler_command`; ``-O3 -march=native``) into a per-user cache folder (:func:`cache_dir`)
under a name that hashes the source, the compiler, the flags and the CPU (:func:`cache_key`), and
renames a whole file into place (:func:`build_library`); later processes load the cached file (no
compiler run). No compiler, a failed compile or a failed load makes :func:`load_kernel` return None,
as does ``PAGED_CPU_KERNEL=0`` in the environment; the engine then keeps the bucketed torch path.

Calling: a :class:`CPUDecodePlan` (:func:`plan_cpu_decode`, once per decode step, shared by every
layer) holds the block table, the context lengths and the C argument block; each layer's call
passes five pointers through ctypes (which releases the GIL). The engine calls it on one thread
(:func:`plan_cpu_decode` says how more threads split the work, and why one is the default).

What the two code paths of the C file cover: with AVX-512 (``__AVX512F__``) head sizes
:data:`SPECIALIZED_HEAD_SIZES` in fp32, bf16 and fp16 with any GQA group; every other shape, and
every CPU without AVX-512, runs its portable loops (GCC / clang vector types the compiler maps to
the CPU's SIMD registers). :meth:`CPUKernel.fast` says whether a shape runs on code measured faster
than the bucketed path (the AVX-512 instances, or the portable loops built for AVX2); elsewhere (ARM,
x86 without AVX2: not measured) the engine keeps the bucketed path. ``make bench-cpu-attention``
times the kernel against contiguous SDPA; docs/benchmarks.md has the figures.
"""

from __future__ import annotations

import ctypes
import hashlib
import itertools
import logging
import os
import platform
import shlex
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import torch

from paged.atomic import atomic_path

__all__ = ["CFLAGS", "ENV_SWITCH", "MIN_PARALLEL_BYTES", "SOURCE_NAME", "SPECIALIZED_HEAD_SIZES", "CPUDecodePlan",
           "CPUKernel", "build_library", "cache_dir", "cache_key", "compiler_command", "cpu_identity", "load_kernel",
           "paged_attention_cpu", "plan_cpu_decode"]

log = logging.getLogger(__name__)

#: Environment variable: ``0`` (or ``false``, ``no``, ``off``) keeps the torch path, without compiling.
ENV_SWITCH = "PAGED_CPU_KERNEL"
#: The C source, installed as package data of ``paged.kernels``.
SOURCE_NAME = "paged_attention_cpu.c"
#: Compiler flags (part of the cache key). ``-fno-trapping-math`` lets the compiler vectorize the
#: portable loops' selects (no code here reads floating-point exception flags).
CFLAGS = ("-O3", "-march=native", "-fno-trapping-math", "-fPIC", "-shared", "-pthread")
#: Head sizes with an AVX-512 instance in the C file (the others run its portable loops).
SPECIALIZED_HEAD_SIZES = (32, 64, 80, 96, 128, 256)
#: Keys and values a call must read (bytes) before its sequences are split across threads: below
#: this, starting a thread (~20-40 µs here) costs more than it saves.
MIN_PARALLEL_BYTES = 4 << 20
_DTYPE_CODES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
_ERRORS = {-1: "unsupported dtype", -2: "out of memory", -3: "inconsistent head counts or sizes"}


class _Args(ctypes.Structure):
    """``pa_args_t`` of the C file (every field 8 bytes)."""

    _fields_ = [("dtype", ctypes.c_int64), ("num_heads", ctypes.c_int64), ("num_kv_heads", ctypes.c_int64),
                ("head_size", ctypes.c_int64), ("block_size", ctypes.c_int64), ("q_seq_stride", ctypes.c_int64),
                ("q_head_stride", ctypes.c_int64), ("block_tables", ctypes.c_void_p), ("table_stride", ctypes.c_int64),
                ("row_offsets", ctypes.c_void_p), ("context_lens", ctypes.c_void_p), ("seq_begin", ctypes.c_int64),
                ("seq_end", ctypes.c_int64), ("scale", ctypes.c_double), ("force_portable", ctypes.c_int64)]


def compiler_command() -> list[str] | None:
    """The C compiler as an argument list: ``sysconfig``'s ``CC`` (how this Python was built), else the
    first of ``cc``, ``gcc``, ``clang`` on the ``PATH``; None when there is none. O(1) (no process)."""
    configured = shlex.split(sysconfig.get_config_var("CC") or "")
    if configured and shutil.which(configured[0]):
        return [shutil.which(configured[0]), *configured[1:]]
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name)
        if found:
            return [found]
    return None


def cpu_identity() -> str:
    """What the binary's ``-march=native`` depends on: on Linux the model name and feature flags of
    ``/proc/cpuinfo``'s first processor, elsewhere the platform's machine and processor strings."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    wanted = [line for line in lines if line.split(":")[0].strip() in ("model name", "flags", "Features", "CPU part")]
    seen: dict[str, str] = {}
    for line in wanted:  # the first processor's lines
        seen.setdefault(line.split(":")[0].strip(), line)
    return "\n".join([platform.machine(), platform.processor(), *seen.values()])


def cache_key(source: bytes, compiler: Sequence[str], flags: Sequence[str] = CFLAGS, cpu: str | None = None) -> str:
    """sha256 (hex, 20 characters) of the source, the compiler (resolved path, size, modification time and
    its extra arguments), the flags, the CPU (:func:`cpu_identity`) and the platform. O(len(source)).
    With the CPU in the name, a home folder shared by machines with different CPUs never loads a
    binary built for another.

    Raises:
        FileNotFoundError: the compiler's file does not exist.
    """
    exe = Path(compiler[0]).resolve()
    st = exe.stat()
    h = hashlib.sha256()
    for part in (source, str(exe).encode(), f"{st.st_size}:{st.st_mtime_ns}".encode(), "\0".join(compiler[1:]).encode(),
                 "\0".join(flags).encode(), (cpu if cpu is not None else cpu_identity()).encode(),
                 f"{sys.platform}:{platform.machine()}".encode()):
        h.update(len(part).to_bytes(8, "little") + part)
    return h.hexdigest()[:20]


def cache_dir() -> Path:
    """Where built kernels go (not created): ``$PAGED_CACHE_DIR/kernels`` if set, else
    ``$XDG_CACHE_HOME/paged/kernels``, else ``~/.cache/paged/kernels`` (per user)."""
    if os.environ.get("PAGED_CACHE_DIR"):
        return Path(os.environ["PAGED_CACHE_DIR"]) / "kernels"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "paged" / "kernels"


def build_library(source: Path, directory: Path, compiler: Sequence[str] | None = None,
                  flags: Sequence[str] = CFLAGS, timeout: float = 300.0) -> tuple[Path, float]:
    """Compile ``source`` into ``directory`` under its :func:`cache_key` unless that file exists already.

    The compiler writes a temporary file in ``directory`` that is renamed when the compile succeeded
    (:func:`paged.atomic.atomic_path`): another process sees no file or a whole one, and processes
    compiling at once each rename a complete library (the last one stays).

    Args:
        source: the C file.
        directory: the cache folder (created if missing).
        compiler: the compiler as an argument list (default :func:`compiler_command`).
        flags: compiler flags (``-lm`` is added after the source).
        timeout: seconds the compiler may run.

    Returns:
        ``(path, seconds)``: the library, and the seconds the compile took (0.0 when it was cached).

    Raises:
        FileNotFoundError: no C compiler (``compiler`` None and none found), or no ``source``.
        subprocess.CalledProcessError, subprocess.TimeoutExpired: the compile failed (its stderr
            in the exception), or ran past ``timeout``.
        OSError: the folder cannot be created or written.
    """
    compiler = list(compiler) if compiler is not None else compiler_command()
    if not compiler:
        raise FileNotFoundError("no C compiler: sysconfig's CC, cc, gcc and clang are all missing")
    code = Path(source).read_bytes()
    target = Path(directory) / f"{Path(source).stem}-{cache_key(code, compiler, flags)}{_suffix()}"
    if target.is_file():
        return target, 0.0
    target.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with atomic_path(target) as tmp:
        subprocess.run([*compiler, *flags, "-o", str(tmp), str(source), "-lm"], check=True, capture_output=True,
                       timeout=timeout, stdin=subprocess.DEVNULL)
    return target, time.perf_counter() - start


def _suffix() -> str:
    return ".dll" if sys.platform == "win32" else ".dylib" if sys.platform == "darwin" else ".so"


class CPUKernel:
    """The loaded C library.

    Attributes:
        path: the shared library file.
        compile_seconds: how long this process spent compiling it (0.0 when it was cached).
    """

    __slots__ = ("path", "compile_seconds", "_lib", "call", "call_threads", "_path")

    def __init__(self, path: Path, compile_seconds: float = 0.0) -> None:
        self.path, self.compile_seconds = Path(path), compile_seconds
        self._lib = lib = ctypes.CDLL(str(path))
        pointer, i64 = ctypes.c_void_p, ctypes.c_int64
        self.call = lib.paged_attention_cpu
        self.call.argtypes = [pointer, pointer, pointer, pointer, pointer]
        self.call.restype = ctypes.c_int
        self.call_threads = lib.paged_attention_cpu_threads
        self.call_threads.argtypes = [pointer, pointer, pointer, pointer, pointer, i64]
        self.call_threads.restype = ctypes.c_int
        self._path = lib.paged_attention_cpu_path
        self._path.argtypes = [i64, i64]
        self._path.restype = ctypes.c_int

    def code(self, dtype: torch.dtype, head_size: int) -> str:
        """Which code of this build computes ``dtype`` / ``head_size``: ``"avx512"`` (an instance for the
        head size), ``"avx2"`` (the portable loops, built for AVX2 and FMA) or ``"portable"`` (another
        CPU); ``"none"`` for a dtype the kernel does not take."""
        if dtype not in _DTYPE_CODES:
            return "none"
        return ("portable", "avx2", "avx512")[self._path(_DTYPE_CODES[dtype], head_size)]

    def fast(self, dtype: torch.dtype, head_size: int) -> bool:
        """Whether this build was measured faster than the bucketed torch path for the shape: its AVX-512
        instances (0.3-0.7x the bucketed time here) and its portable loops built for AVX2 (0.4-0.97x,
        an ``-march=haswell`` build on the same machine). Other CPUs (ARM, x86 without AVX2) were not
        measured, so False there."""
        return self.code(dtype, head_size) in ("avx512", "avx2")


_lock = threading.Lock()
_loaded: dict[str, CPUKernel | None] = {}


def _enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


def load_kernel() -> CPUKernel | None:
    """The kernel of this process: built (:func:`build_library` into :func:`cache_dir`) and loaded on the
    first call, then the same object; None when ``PAGED_CPU_KERNEL=0`` or when there is no compiler or
    the compile or the load fails (logged at debug level only, so nothing reaches a notebook's stderr;
    not retried in this process). Thread-safe.

    Cost: first call ~8 s with a compile (gcc 12, -O3, on this project's 2-core machine), ~10 ms with a
    cached library.
    """
    if not _enabled():
        return None
    with _lock:
        if "kernel" not in _loaded:
            _loaded["kernel"] = _build_and_load()
        return _loaded["kernel"]


def _build_and_load() -> CPUKernel | None:
    try:
        with resources.as_file(resources.files("paged.kernels") / SOURCE_NAME) as source:
            path, seconds = build_library(source, cache_dir())
        kernel = CPUKernel(path, seconds)
    except (OSError, subprocess.SubprocessError) as err:
        detail = getattr(err, "stderr", b"") or b""
        log.debug("CPU decode kernel unavailable, the bucketed torch path is used: %s %s", err,
                  detail.decode(errors="replace")[-2000:])
        return None
    log.debug("CPU decode kernel %s (compiled in %.1f s)", path, seconds)
    return kernel


@dataclass(slots=True)
class CPUDecodePlan:
    """A decode step's block tables and lengths in the C kernel's form (built once, shared by every layer).

    Attributes:
        kernel: the loaded :class:`CPUKernel`.
        num_seqs: sequences.
        total_tokens: the sum of the context lengths (tokens).
        max_threads: threads a large call may use (see :data:`MIN_PARALLEL_BYTES`).
        args: the C argument block; its shape fields are refilled when a call's shape differs.
        address: ``args``' address.
        keep: the buffers ``args`` points into (kept alive with the plan).
        signature: the query / cache shape ``args`` was last filled for.
        num_threads: the threads calls of that shape use.
    """

    kernel: CPUKernel
    num_seqs: int
    total_tokens: int
    max_threads: int
    args: _Args
    address: int
    keep: tuple
    signature: tuple | None = None
    num_threads: int = 1


def plan_cpu_decode(kernel: CPUKernel, block_tables: torch.Tensor | Sequence[Sequence[int]],
                    context_lens: torch.Tensor | Sequence[int], block_size: int,
                    num_threads: int = 1) -> CPUDecodePlan:
    """The C kernel's view of a decode step (§4.1): block tables and context lengths, once per step.

    Args:
        kernel: from :func:`load_kernel`.
        block_tables: a ``[num_seqs, max_blocks]`` int32 CPU tensor (used in place; entries past a
            sequence's ``ceil(len / block_size)`` blocks are never read), or one list of block ids
            per sequence (the engine's tables; only the used blocks are copied, into one flat int32
            array with a row offset per sequence).
        context_lens: ``[num_seqs]`` int32 CPU tensor, or a list of ints (tokens, each ≥ 1 and at most
            the row's blocks × ``block_size``).
        block_size: tokens per block.
        num_threads: threads a large call may use (≥ 1): with more than one the C side splits the
            sequences into that many ranges of about equal token counts, one POSIX thread each (the
            calling one included), when the call reads at least :data:`MIN_PARALLEL_BYTES` of keys
            and values. One by default: on this project's 2-core machine, shared with another
            process, two threads took 0.95-1.44x the time of one (wall time, 8-128 sequences of
            512-2,048 tokens).

    Returns:
        :class:`CPUDecodePlan`. Cost: O(num_seqs) for tensors; for lists, one pass over the used
        block ids (~17 ns each here: 0.3 ms for 128 sequences of 128 blocks), about half the
        bucketed path's :func:`~paged.kernels.bucketed.plan_buckets`.

    Raises:
        TypeError: a tensor that is not int32, contiguous and on the CPU.
    """
    args = _Args()
    if isinstance(block_tables, torch.Tensor):
        if block_tables.dtype != torch.int32 or block_tables.device.type != "cpu" or block_tables.stride(-1) != 1:
            raise TypeError("block_tables must be an int32 CPU tensor with a contiguous last dimension")
        args.block_tables, args.table_stride = block_tables.data_ptr(), block_tables.stride(0)
        tables_keep = block_tables
    else:
        used = [row[:-(-int(n) // block_size)] for row, n in zip(block_tables, context_lens)]
        flat = np.fromiter(itertools.chain.from_iterable(used), dtype=np.int32)
        offsets = np.zeros(len(used), dtype=np.int64)
        np.cumsum([len(row) for row in used[:-1]], out=offsets[1:])
        if not flat.size:
            flat = np.zeros(1, dtype=np.int32)
        args.block_tables, args.row_offsets = flat.ctypes.data, offsets.ctypes.data if used else None
        tables_keep = (flat, offsets)
    if isinstance(context_lens, torch.Tensor):
        if context_lens.dtype != torch.int32 or context_lens.device.type != "cpu" or not context_lens.is_contiguous():
            raise TypeError("context_lens must be a contiguous int32 CPU tensor")
        lens_keep, num_seqs = context_lens, context_lens.numel()
        total = int(context_lens.sum()) if num_seqs else 0
    else:
        lens_keep = array("i", context_lens)
        num_seqs, total = len(lens_keep), sum(lens_keep)
    args.context_lens = lens_keep.data_ptr() if isinstance(lens_keep, torch.Tensor) else (
        lens_keep.buffer_info()[0] if num_seqs else None)
    args.block_size, args.seq_begin, args.seq_end = block_size, 0, num_seqs
    return CPUDecodePlan(kernel, num_seqs, total, max(1, num_threads), args, ctypes.addressof(args),
                         (tables_keep, lens_keep))


def paged_attention_cpu(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                        plan: CPUDecodePlan, scale: float, *, portable: bool = False) -> torch.Tensor:
    """Decode attention through the block tables with the C kernel (§4.1), no gather.

    Args:
        query: ``[num_seqs, num_heads, head_size]`` on the CPU, last dimension contiguous (any
            strides otherwise: the engine's is a transposed view).
        key_cache, value_cache: ``[num_blocks, block_size, num_kv_heads, head_size]`` contiguous, the
            query's dtype (fp32, bf16 or fp16).
        plan: the step's :class:`CPUDecodePlan` (its block size equals the caches').
        scale: softmax scale.
        portable: run the C file's portable loops even where an AVX-512 instance exists (tests).

    Returns:
        ``[num_seqs, num_heads, head_size]`` in the query's dtype (scores, softmax and sums in fp32,
        rounded once). Cost: one pass over the used keys and values, ~2.5 µs of Python per call; at
        the shipped model's shape 0.24–0.97× the time of SDPA over a contiguous head-major copy,
        0.1–0.5× the bucketed path's (``make bench-cpu-attention``, one thread).

    Raises:
        TypeError: a dtype other than fp32 / bf16 / fp16, mixed dtypes, or non-contiguous caches.
        RuntimeError: the kernel reports an error (inconsistent head counts, out of memory).
    """
    num_seqs, num_heads, head_size = query.shape
    out = torch.empty((num_seqs, num_heads, head_size), dtype=query.dtype)
    if num_seqs == 0:
        return out
    signature = (query.dtype, num_heads, head_size, query.stride(0), query.stride(1), key_cache.shape, scale, portable)
    args = plan.args
    if signature != plan.signature:
        if (query.dtype not in _DTYPE_CODES or key_cache.dtype != query.dtype or value_cache.dtype != query.dtype
                or query.stride(2) != 1 or not key_cache.is_contiguous() or not value_cache.is_contiguous()):
            raise TypeError("query, key_cache and value_cache must share a dtype among fp32 / bf16 / fp16, the caches "
                            "contiguous and the query's last dimension contiguous")
        _, block_size, num_kv_heads, _ = key_cache.shape
        args.dtype, args.num_heads, args.num_kv_heads, args.head_size = (_DTYPE_CODES[query.dtype], num_heads,
                                                                          num_kv_heads, head_size)
        args.q_seq_stride, args.q_head_stride, args.scale = query.stride(0), query.stride(1), scale
        args.force_portable = int(portable)
        read = plan.total_tokens * num_kv_heads * head_size * query.element_size() * 2
        plan.num_threads = plan.max_threads if read >= MIN_PARALLEL_BYTES else 1
        plan.signature = signature
    if plan.num_threads > 1:
        rc = plan.kernel.call_threads(plan.address, query.data_ptr(), key_cache.data_ptr(), value_cache.data_ptr(),
                                       out.data_ptr(), plan.num_threads)
    else:
        rc = plan.kernel.call(plan.address, query.data_ptr(), key_cache.data_ptr(), value_cache.data_ptr(),
                               out.data_ptr())
    if rc:
        raise RuntimeError(f"CPU decode kernel: {_ERRORS.get(rc, rc)}")
    return out
