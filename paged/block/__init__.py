"""The paper's block manager (§4.2–§4.5): :mod:`~paged.block.allocator` (free pool, reference counts),
:mod:`~paged.block.prefix_caching` (APC, with :mod:`~paged.block.free_queue`), :mod:`~paged.block.block_table` (one
sequence's logical→physical map), :mod:`~paged.block.copy_on_write`, and :mod:`~paged.block.manager`, the
scheduler's :class:`paged.core.KVCacheManager` (swapping, shared prefixes; slots in :mod:`~paged.block.accounting`).
"""

from paged.block.allocator import BlockAllocator, OutOfBlocksError
from paged.block.block_table import BlockTable
from paged.block.manager import PagedKVCacheManager
from paged.block.prefix_caching import PrefixCachingBlockAllocator, hash_block_tokens

__all__ = ["BlockAllocator", "BlockTable", "OutOfBlocksError", "PagedKVCacheManager", "PrefixCachingBlockAllocator",
           "hash_block_tokens"]
