"""Shared test setup.

The helpers several test modules use live in ``support.py`` (imported as ``support``).

Triton reads ``TRITON_INTERPRET`` when a kernel is defined (when ``paged.kernels.triton_paged_attention``
is imported), so it is set here, before any test module imports it: the Triton kernels then run
in Triton's CPU interpreter on machines without a GPU. An explicit ``TRITON_INTERPRET=0`` in the
environment is respected (to test the compiled kernels on a GPU).
"""

import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))  # tests import shared helpers as `support`

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
