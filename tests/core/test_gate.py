"""ComputeGate: computations, exclusive changes and closing, from several threads."""

from __future__ import annotations

import threading

import pytest

from genlm_core.errors import ModelClosedError
from genlm_core.runtime import ComputeGate

GUARD = 10.0  # seconds before a wait counts as a deadlock


def run_threads(*targets) -> list[threading.Thread]:
    threads = [threading.Thread(target=t, daemon=True) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(GUARD)
    return threads


def test_two_thread_safe_computations_asking_for_exclusive_access_both_get_it():
    gate = ComputeGate(concurrent=True)
    both_computing = threading.Barrier(2, timeout=GUARD)
    inside: list[int] = []
    owners_at_once: list[int] = []

    def computation(i: int) -> None:
        with gate.computing():
            both_computing.wait()
            with gate.exclusive():  # e.g. a backend's hook clearing a shared cache
                owners_at_once.append(len(inside))
                inside.append(i)
                inside.remove(i)

    threads = run_threads(lambda: computation(0), lambda: computation(1))
    assert not any(t.is_alive() for t in threads), "deadlock: both wait for the other"
    assert owners_at_once == [0, 0]  # never two exclusive sections at once


def test_closed_gate_refuses_new_computations_but_finishes_the_running_one():
    gate = ComputeGate()
    started, finish = threading.Event(), threading.Event()
    outcomes: list[str] = []

    def running() -> None:
        with gate.computing():
            started.set()
            finish.wait(GUARD)
            with gate.computing():  # nested: part of the running computation
                outcomes.append("nested ran")

    def closer() -> None:
        started.wait(GUARD)
        threading.Timer(0.05, finish.set).start()
        gate.close(lambda: ModelClosedError("the model is closed"))
        outcomes.append("closed")  # only once the running computation is done

    threads = run_threads(running, closer)
    assert not any(t.is_alive() for t in threads)
    assert outcomes == ["nested ran", "closed"]
    with pytest.raises(ModelClosedError, match="the model is closed"):
        with gate.computing():
            pass
    with gate.exclusive():  # changes (freeing the model) are still allowed
        pass
