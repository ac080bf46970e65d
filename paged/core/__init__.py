"""The scheduler's world (paper §4.5): sequences, the KV cache manager interface, the scheduler.

The package's bottom layer (with :mod:`paged.workloads`): it imports nothing else of ``paged``, so the paged
manager, the contiguous baselines, the simulator and the engine all build on this one scheduler and interface.
"""

from paged.core.kv_cache_manager import AllocStatus, KVCacheManager, MemoryUsage, RequestTooLargeError
from paged.core.scheduler import PREEMPTION_MODES, Scheduler, SchedulerOutputs
from paged.core.sequence import Sequence, SequenceGroup, SequenceStatus

__all__ = ["AllocStatus", "KVCacheManager", "MemoryUsage", "PREEMPTION_MODES", "RequestTooLargeError", "Scheduler",
           "SchedulerOutputs", "Sequence", "SequenceGroup", "SequenceStatus"]
