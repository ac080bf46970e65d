"""Fixtures of the engine tests: a tiny random Llama (vocabulary 64) and four prompts of it.

``tests/engine/test_llm.py`` defines its own (vocabulary 256), which take precedence there.
"""

import pytest
import torch
from support import tiny_llama


@pytest.fixture(scope="module")
def model():
    return tiny_llama(vocab=64)


@pytest.fixture(scope="module")
def prompts():
    gen = torch.Generator().manual_seed(1)
    return [torch.randint(3, 64, (n,), generator=gen).tolist() for n in (5, 17, 33, 9)]
