"""The paper's contiguous baselines (§3, §6.1): Orca's reservation policies over a buddy allocator.

* :mod:`~paged.contiguous.reservation`: how many slots Max / Pow2 / Oracle reserve per request;
* :mod:`~paged.contiguous.buddy`: :class:`BuddyAllocator`, contiguous power-of-two reservations;
* :mod:`~paged.contiguous.manager`: :class:`ContiguousKVCacheManager`, one reservation per sequence
  behind the scheduler's :class:`paged.core.KVCacheManager` interface.

FasterTransformer's request-level batching, the other contiguous baseline, is a serving loop of its
own and lives with the simulator (:mod:`paged.sim.static_batching`).
"""

from paged.contiguous.buddy import BuddyAllocator
from paged.contiguous.manager import ContiguousKVCacheManager
from paged.contiguous.reservation import POLICIES, reservation_size

__all__ = ["BuddyAllocator", "ContiguousKVCacheManager", "POLICIES", "reservation_size"]
