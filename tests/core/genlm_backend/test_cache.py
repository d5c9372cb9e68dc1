"""genlm-backend 0.3.1 ``tests/test_cache.py``, ported: ``genlm.backend`` -> ``genlm_core``.

Difference: ``test_cache_cpu_transfer`` read the stored value through the private
``cache.cache[key]`` tuple; here the public ``get`` shows where it is stored.
"""

import pytest
import torch

from genlm_core.cache import OutputCache

cuda_only = pytest.mark.cuda  # skipped, with the reason, without an NVIDIA GPU


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_cache_size_limit(device):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("requires CUDA (torch.cuda.is_available() is False)")

    cache = OutputCache(maxsize=2, move_to_cpu=False)

    cache["tensor1"] = torch.rand(1000, 1000, device=device)
    assert len(cache) == 1

    cache["tensor2"] = torch.rand(1000, 1000, device=device)
    assert len(cache) == 2

    cache["tensor3"] = torch.rand(1000, 1000, device=device)  # evicts the first
    assert len(cache) == 2
    assert "tensor1" not in cache
    assert "tensor2" in cache
    assert "tensor3" in cache


def test_invalid_key():
    cache = OutputCache(maxsize=2, move_to_cpu=False)

    with pytest.raises(KeyError):
        cache["invalid"]


@cuda_only
def test_memory_freed_on_eviction():
    cache_size = 2
    cache = OutputCache(maxsize=cache_size, move_to_cpu=False)
    initial_memory = torch.cuda.memory_allocated()
    for i in range(cache_size):
        cache[f"tensor{i}"] = torch.rand(1000, 1000, device="cuda")
    memory_at_capacity = torch.cuda.memory_allocated()
    assert initial_memory < memory_at_capacity
    for i in range(cache_size * 2):
        cache[f"tensor_extra_{i}"] = torch.rand(1000, 1000, device="cuda")
        assert torch.cuda.memory_allocated() <= memory_at_capacity * 1.2


@cuda_only
def test_memory_freed_on_clear():
    cache_size = 2
    cache = OutputCache(maxsize=cache_size, move_to_cpu=False)
    initial_memory = torch.cuda.memory_allocated()
    for i in range(cache_size):
        cache[f"tensor{i}"] = torch.rand(1000, 1000, device="cuda")
    assert torch.cuda.memory_allocated() > initial_memory
    cache.clear()
    assert torch.cuda.memory_allocated() <= initial_memory * 1.1


@cuda_only
def test_cache_cpu_transfer():
    cache = OutputCache(maxsize=2, move_to_cpu=True)
    cuda_tensor = torch.rand(100, 100, device="cuda")
    before = torch.cuda.memory_allocated()
    cache["test"] = cuda_tensor
    del cuda_tensor
    assert torch.cuda.memory_allocated() < before  # stored on the CPU
    retrieved_tensor = cache["test"]
    assert retrieved_tensor.device.type == "cuda"  # moved back when read


@cuda_only
def test_cache_contains():
    cache = OutputCache(maxsize=2, move_to_cpu=False)
    tensor = torch.rand(100, 100, device="cuda")
    cache["key"] = tensor
    assert "key" in cache
    assert "nonexistent" not in cache


def test_cache_contains_cpu():
    """``test_cache_contains`` on the CPU, so machines without CUDA check it too."""
    cache = OutputCache(maxsize=2, move_to_cpu=False)
    cache["key"] = torch.rand(100, 100)
    assert "key" in cache
    assert "nonexistent" not in cache
