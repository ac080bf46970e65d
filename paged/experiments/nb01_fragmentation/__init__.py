"""Notebook 01, memory waste (Fig. 2, §3): the waste of each system (``fragmentation``) and the traces' lengths (``workloads``, Fig. 11)."""
