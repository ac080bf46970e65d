"""The paper's contribution (§4.2–§4.4): physical KV blocks, block tables, copy-on-write, the paged manager.

* :mod:`~paged.block.allocator`: :class:`BlockAllocator`, the free pool and reference counts;
* :mod:`~paged.block.free_queue` and :mod:`~paged.block.prefix_caching`:
  :class:`PrefixCachingBlockAllocator`, freed full blocks kept findable by their chained hash (APC);
* :mod:`~paged.block.block_table`: :class:`BlockTable`, one sequence's logical→physical map, fork;
* :mod:`~paged.block.copy_on_write`: when a write into a shared block needs a private copy;
* :mod:`~paged.block.manager`: :class:`PagedKVCacheManager`, a block table per sequence behind the
  scheduler's :class:`paged.core.KVCacheManager` interface, with swapping (§4.5), shared prefixes and
  prefix caching; :mod:`~paged.block.accounting`: where its slots are (Fig. 2).
"""

from paged.block.allocator import BlockAllocator, OutOfBlocksError
from paged.block.block_table import BlockTable
from paged.block.manager import PagedKVCacheManager
from paged.block.prefix_caching import PrefixCachingBlockAllocator, hash_block_tokens

__all__ = ["BlockAllocator", "BlockTable", "OutOfBlocksError", "PagedKVCacheManager", "PrefixCachingBlockAllocator",
           "hash_block_tokens"]
