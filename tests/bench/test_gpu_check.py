"""``make gpu-check`` without a GPU: one clear error line, exit status 2, nothing run."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error (with a GPU it would run the check)")
@pytest.mark.parametrize("interpret, message", [("0", "needs a CUDA GPU"), ("1", "TRITON_INTERPRET=1 is set")])
def test_gpu_check_refuses_a_machine_without_cuda(tmp_path, interpret, message):
    env = {**os.environ, "TRITON_INTERPRET": interpret}
    out = subprocess.run([sys.executable, "-m", "paged.bench.gpu_check", "--out", str(tmp_path / "out")],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "out").exists()
