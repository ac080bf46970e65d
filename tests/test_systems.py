"""The one registry of systems and the KV cache manager factory (paged.systems)."""

from __future__ import annotations

import pytest

from paged.block import PagedKVCacheManager
from paged.contiguous import ContiguousKVCacheManager
from paged.systems import FIG2_SYSTEMS, PAPER_SYSTEMS, SYSTEMS, get_system, make_kv_manager, system_names


def test_paper_systems_and_labels():
    assert PAPER_SYSTEMS == ("paged", "orca-oracle", "orca-pow2", "orca-max", "fastertransformer")
    assert set(FIG2_SYSTEMS) <= set(PAPER_SYSTEMS)
    assert get_system("orca-pow2").label == "Orca (Pow2)" and get_system("orca-pow2").reservation == "pow2"
    assert get_system("paged").paged_kernel and not get_system("orca-max").paged_kernel


def test_the_factory_builds_each_kind():
    paged = make_kv_manager("paged", 983, 16, num_cpu_blocks=8)
    assert isinstance(paged, PagedKVCacheManager) and paged.gpu_allocator.num_blocks == 983
    for name in ("orca-oracle", "orca-pow2", "orca-max"):
        m = make_kv_manager(name, 983, 16, max_seq_len=2048)
        assert isinstance(m, ContiguousKVCacheManager) and m.policy == SYSTEMS[name].reservation
        assert m.num_total_slots == 15_728 and m.block_size == 1  # the same slots, reserved one by one
    engine_view = make_kv_manager("orca-max", 125, 8, max_seq_len=256, contiguous_block_size=16)
    assert engine_view.num_total_slots == 992 and engine_view.block_size == 16


def test_the_factory_builds_the_classes_asked_for():
    class Paged(PagedKVCacheManager):
        pass

    class Contiguous(ContiguousKVCacheManager):
        pass

    assert type(make_kv_manager("paged", 8, 4, classes=(Paged, Contiguous))) is Paged
    assert type(make_kv_manager("orca-pow2", 8, 4, classes=(Paged, Contiguous))) is Contiguous


def test_bad_names_and_systems_without_a_manager():
    with pytest.raises(ValueError, match="unknown system 'vllm'.*paged"):
        get_system("vllm")
    with pytest.raises(ValueError, match="no KV cache manager"):
        make_kv_manager("fastertransformer", 1000, 16)


def test_executor_lists():
    assert system_names(executor="engine", manager=True) == ("paged", "orca-oracle", "orca-pow2", "orca-max")
    assert "fastertransformer" in system_names(executor="sim", manager=False)
