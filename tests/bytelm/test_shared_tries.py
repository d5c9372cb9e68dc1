"""The one registry of what byte states share per model (genlm_bytelm/shared_tries.py).

Tries and filters are built once per model and key, shared by the beam and the exact
state (the exact state's float64 trie reuses the beam's scan of the vocabulary), and
go with their model.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import threading
import weakref

import numpy as np
import pytest

from genlm_bytelm import BeamParams, ByteBeamState, ExactByteState, shared_tries
from genlm_bytelm.exact import trie_state
from genlm_core.tokenization import Token
from genlm_trie_numba import byte_trie

VOCAB = [Token(i, bs) for i, bs in enumerate([b"a", b"b", b"ab", b"ba", b"<eos>", b"abc", b"c"])]
beam_trie = shared_tries.shared_trie_async
exact_trie = shared_tries.shared_exact_trie_async


class Model:
    """What the tries need of a model: its byte vocabulary (and a weak reference)."""

    byte_vocab = VOCAB


class NoWeakref:
    """A model that takes no weak reference: gets tries of its own, unshared."""

    __slots__ = ()
    byte_vocab = VOCAB


@pytest.fixture
def scans(monkeypatch):
    """Counts the vocabulary scans of byte tries (calls of ``byte_trie._encode``)."""
    calls = []
    real = byte_trie._encode

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(byte_trie, "_encode", counted)
    return calls


async def test_beam_and_exact_tries_share_one_scan(scans):
    model = Model()
    eos = {b"<eos>"}
    exact = await exact_trie(model, eos)
    beam = await beam_trie(model, eos)
    assert len(scans) == 1
    assert exact.trie._arrays is beam.trie._arrays
    assert await exact_trie(model, eos) is exact and await beam_trie(model, eos) is beam
    ws = np.random.default_rng(0).dirichlet(np.ones(len(VOCAB)), size=3)
    for mode in byte_trie.TrieMode:
        wide = exact.trie.batch_weight_sum(ws, mode=mode).numpy()
        narrow = beam.trie.batch_weight_sum(ws, mode=mode).numpy()
        assert wide.dtype == np.float64 and narrow.dtype == np.float32
        np.testing.assert_allclose(wide, narrow, rtol=1e-6)
    await exact_trie(model, set())  # other EOS strings: another trie
    assert len(scans) == 2


async def test_keys_tell_options_apart(scans):
    model = Model()
    plain = await beam_trie(model, set())
    numba = await beam_trie(model, set(), {"backend": "numba-byte"})
    assert numba is not plain and numba is await beam_trie(model, set(), {"backend": "numba-byte"})
    unhashable = {"eot_sentinel": {"not": "a key"}}
    own = await beam_trie(model, set(), unhashable)
    assert own is not await beam_trie(model, set(), unhashable)
    assert shared_tries.is_shared(plain) and not shared_tries.is_shared(own)
    assert len(scans) == 4


async def test_a_model_without_weak_references_gets_tries_of_its_own():
    model = NoWeakref()
    trie = await beam_trie(model, set())
    assert trie is not await beam_trie(model, set())
    assert not shared_tries.is_shared(trie)


async def test_tries_go_with_their_model():
    model = Model()
    trie = weakref.ref(await exact_trie(model, set()))
    assert shared_tries.is_shared(trie())
    model = weakref.ref(model)
    for _ in range(500):  # the worker that handed the trie over may still be returning
        await asyncio.sleep(0.01)
        gc.collect()
        if trie() is None:
            break
    assert model() is None and trie() is None


async def test_concurrent_builds_build_once(scans):
    model = Model()
    tries = await asyncio.gather(
        *(exact_trie(model, set()) for _ in range(4)), *(beam_trie(model, set()) for _ in range(4))
    )
    assert len({id(t) for t in tries[:4]}) == 1 and len({id(t) for t in tries[4:]}) == 1
    assert len(scans) == 1


async def test_the_exact_build_never_waits_in_a_worker_for_a_queued_build(monkeypatch):
    """One build worker: the exact trie's build is queued before the beam trie's it reads.

    Were the exact build to wait for the beam's inside the worker, the beam's build,
    queued behind it, could never run (with every worker so blocked, a deadlock).
    """
    workers = concurrent.futures.ThreadPoolExecutor(1)
    monkeypatch.setattr(shared_tries, "_BUILDS", workers)
    gate = threading.Event()
    workers.submit(gate.wait)  # the worker is busy until both builds are queued
    model = Model()
    exact = asyncio.ensure_future(exact_trie(model, set()))
    await asyncio.sleep(0)
    beam = asyncio.ensure_future(beam_trie(model, set()))
    await asyncio.sleep(0)
    gate.set()
    try:
        wide, narrow = await asyncio.wait_for(asyncio.gather(exact, beam), 60)
    finally:  # on a hang, free the worker, so that the test run can exit
        for future in list(shared_tries._PENDING.values()):
            future.cancel()
        workers.shutdown(wait=False)
    assert wide.trie._arrays is narrow.trie._arrays


async def test_a_failed_build_is_not_stored():
    class Broken(Model):
        byte_vocab = []  # no vocabulary: the trie's build raises

    model = Broken()
    for _ in range(2):  # the second call builds again, and fails again
        with pytest.raises(ValueError, match="decode cannot be empty"):
            await beam_trie(model, set())


async def test_both_states_of_a_model_share_the_scan(llm, eos):
    beam = await ByteBeamState.initial(llm, BeamParams(K=2, eos_byte_strings=eos))
    exact = await ExactByteState.initial(llm, eos_byte_strings=eos)
    assert exact.shared.trie.trie._arrays is beam.states[0].trie.trie._arrays
    assert exact.shared.canon is trie_state.shared_filter(llm)
