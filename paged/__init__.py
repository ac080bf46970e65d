"""paged: a readable, measurable reproduction of PagedAttention (Kwon et al., SOSP 2023).

The paper's contribution lives in the KV cache manager: :class:`BlockAllocator` (physical
blocks and reference counts) and :class:`BlockTable` (one sequence's logical→physical map with
fork and copy-on-write). Everything else (scheduler, simulator, kernel, engine) is built on them.
"""

from paged.allocator import BlockAllocator, OutOfBlocksError
from paged.block_table import BlockTable

__all__ = ["BlockAllocator", "BlockTable", "OutOfBlocksError"]
__version__ = "0.1.0"
