"""``triton`` is optional outside Linux: the package imports without it and ``backend="triton"`` names it."""

import subprocess
import sys

CODE = """
import sys
sys.modules["triton"] = None  # as on a machine without triton: `import triton` raises ModuleNotFoundError
import torch
from paged.kernels.attention import paged_attention
q = torch.zeros(1, 2, 32); kv = torch.zeros(1, 8, 2, 32)
ctx = torch.tensor([1], dtype=torch.int32); tables = torch.zeros(1, 1, dtype=torch.int32)
print(paged_attention(q, kv, kv, tables, ctx, backend="reference").shape)
try:
    paged_attention(q, kv, kv, tables, ctx, backend="triton")
except ImportError as err:
    print("ImportError:", err)
"""


def test_the_reference_backend_runs_and_triton_is_named_without_triton():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    shape, error = out.stdout.strip().splitlines()
    assert shape == "torch.Size([1, 2, 32])"
    assert error.startswith("ImportError: backend='triton' needs the triton package") and "reference" in error
