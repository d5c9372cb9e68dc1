"""The forward's helpers: worker threads, reused logits buffers, per-row log-probs."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest
import torch
from session_requires import require

require("genlm_hf.lm", reason="genlm-hf is not installed")

from genlm_core.runtime import RowPool  # noqa: E402
from genlm_hf._logits import log_softmax_rows, logits_into  # noqa: E402
from genlm_hf._threads import (  # noqa: E402
    SMALL_MODEL_PARAMETERS,
    auto_worker_threads,
    default_torch_threads,
    leave_cores_to_worker,
    set_thread_torch_threads,
    usable_cpus,
)
from genlm_hf._workspace import Workspace  # noqa: E402


def in_thread(fn):
    out = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join()
    return out[0]


def test_set_thread_torch_threads_changes_only_the_calling_thread():
    # This thread's own count may differ from new threads': a model built here earlier
    # in the session left its cores to its worker (caller_threads).
    before, default = torch.get_num_threads(), default_torch_threads()

    def worker():
        set_thread_torch_threads(1)
        return torch.get_num_threads()

    assert in_thread(worker) == 1
    assert torch.get_num_threads() == before  # this thread
    assert in_thread(torch.get_num_threads) == default  # threads started afterwards


def os_thread_ids() -> set[str]:
    """The process's OS threads (an OpenMP pool's threads are among them)."""
    return set(os.listdir("/proc/self/task"))


def ended(thread_ids: set[str], timeout: float = 2.0) -> bool:
    """Whether every one of ``thread_ids`` has exited (an exiting thread may linger briefly)."""
    deadline = time.monotonic() + timeout
    while thread_ids & os_thread_ids():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.mark.skipif(
    not os.path.isdir("/proc/self/task") or usable_cpus() < 2 or default_torch_threads() < 2,
    reason="needs Linux and at least 2 CPUs with multi-threaded torch (an OpenMP pool to end)",
)
def test_leave_cores_to_worker_ends_the_calling_threads_openmp_pool():
    """The pool's threads are OS threads: they go, and no later torch work brings them back.

    Compared by thread id, not count: other tests' threads may exit meanwhile.
    """
    big = torch.randn(4_000_000)

    def caller():
        before = os_thread_ids()
        big.exp()  # a parallel operation: this thread's OpenMP pool starts
        pool = os_thread_ids() - before
        left = leave_cores_to_worker()
        gone = ended(pool)
        settled = os_thread_ids()
        a = torch.randn(512, 512)
        (a @ a).exp_()  # MKL, then OpenMP: neither may start a pool again
        big.exp()
        return pool, left, gone, os_thread_ids() - settled, torch.get_num_threads()

    mine, default = torch.get_num_threads(), default_torch_threads()
    pool, left, gone, started_later, threads = in_thread(caller)
    assert pool  # torch's default threads: a pool beside this thread
    assert left is True and gone
    assert not started_later
    assert threads == 1
    assert torch.get_num_threads() == mine  # this thread
    assert in_thread(torch.get_num_threads) == default  # threads started afterwards


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "1"])
def test_caller_threads_validated(hf_models, bad):
    with pytest.raises(ValueError, match="caller_threads must be an integer >= 1"):
        hf_models("tiny-gpt2").lm(caller_threads=bad)


@pytest.mark.skipif(usable_cpus() < 2, reason="needs at least 2 CPUs (a multi-threaded worker)")
def test_a_multi_threaded_worker_leaves_the_cores_to_it(hf_models):
    """The thread that builds the model gets one torch thread, unless told otherwise."""
    loaded = hf_models("tiny-gpt2")

    def build(**opts):
        lm = loaded.lm(**opts)
        threads = torch.get_num_threads()
        lm.cleanup()
        return threads

    mine, default = torch.get_num_threads(), default_torch_threads()  # a new thread's
    assert in_thread(lambda: build(worker_threads=2)) == 1
    assert in_thread(lambda: build()) == default  # a single-threaded worker: left as it is
    assert in_thread(lambda: build(worker_threads=2, caller_threads=2)) == 2
    assert torch.get_num_threads() == mine


@pytest.mark.skipif(
    not os.path.isdir("/proc/self/task") or usable_cpus() < 2,
    reason="needs Linux and at least 2 CPUs (a multi-threaded worker's OpenMP pool)",
)
async def test_a_multi_threaded_worker_holds_its_threads_during_batches_only(hf_models):
    """An idle worker's pool would slow every other thread's parallel work."""
    lm = hf_models("tiny-gpt2").lm(worker_threads=2, caller_threads=torch.get_num_threads())
    await lm.next_token_logprobs([1, 2])  # the worker thread starts
    idle = os_thread_ids()
    during = []
    forward_rows = lm.forward_rows

    def spy(adapter, group):
        rows = forward_rows(adapter, group)
        during.append((os_thread_ids() - idle, torch.get_num_threads()))
        return rows

    lm.forward_rows = spy
    rows = await asyncio.gather(*(lm.next_token_logprobs([1, 2, t]) for t in range(3, 40)))
    ((pool, threads),) = during  # one batch of 37 rows
    assert len(pool) == 1 and threads == 2  # its pool's one thread beside the worker
    assert ended(pool)  # after the batch
    torch.testing.assert_close(rows[0], lm.next_token_logprobs_uncached([1, 2, 3]))
    lm.cleanup()


@pytest.mark.skipif(usable_cpus() < 2, reason="needs at least 2 CPUs (a multi-threaded worker)")
def test_a_sync_callers_forward_runs_with_the_workers_threads(hf_models):
    """The caller's thread left its cores to the worker; its own sync forwards still get them."""
    loaded = hf_models("tiny-gpt2")

    def caller():
        lm = loaded.lm(worker_threads=2)
        during = []
        forward_rows = lm.forward_rows

        def spy(adapter, group):
            during.append(torch.get_num_threads())
            return forward_rows(adapter, group)

        lm.forward_rows = spy
        row = lm.next_token_logprobs_sync([1, 2, 3])
        after = torch.get_num_threads()
        expected = lm.next_token_logprobs_uncached([1, 2, 3])
        lm.cleanup()
        return during, after, row, expected

    during, after, row, expected = in_thread(caller)
    assert during == [2]
    assert after == 1  # put back: this thread left the cores to the worker
    torch.testing.assert_close(row, expected)


def test_auto_worker_threads_single_threads_only_small_cpu_models():
    small = torch.nn.Linear(10, 10)
    big = torch.nn.Embedding(SMALL_MODEL_PARAMETERS // 64 + 1, 64, _freeze=True)
    assert auto_worker_threads(small, torch.device("cpu")) == 1
    assert auto_worker_threads(big, torch.device("cpu")) is None
    assert auto_worker_threads(small, torch.device("cuda")) is None


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_worker_threads_validated(hf_models, bad):
    with pytest.raises(ValueError, match="worker_threads must be an integer >= 1"):
        hf_models("tiny-gpt2").lm(worker_threads=bad)


async def test_worker_threads_apply_to_the_batcher_thread_only(hf_models):
    lm = hf_models("tiny-gpt2").lm()
    assert lm.worker_threads == 1  # tiny GPT-2: a few million parameters
    seen = []
    compute = lm.compute_batch

    def spy(requests):
        seen.append(torch.get_num_threads())
        return compute(requests)

    lm.compute_batch = spy
    before = torch.get_num_threads()
    await lm.next_token_logprobs([1, 2])
    assert seen == [1]
    assert torch.get_num_threads() == before
    lm.cleanup()


def test_log_softmax_rows_own_their_storage_and_match_torch():
    logits = torch.randn(5, 300, dtype=torch.float64)
    ws = Workspace(keep_bytes=1 << 20)
    for workspace in (None, ws):
        rows = log_softmax_rows(logits, workspace)
        assert len(rows) == 5
        for j, row in enumerate(rows):
            assert row.dtype == torch.float32 and row.shape == (300,)
            assert row.untyped_storage().nbytes() == row.nbytes
            torch.testing.assert_close(row, torch.log_softmax(logits[j].float(), -1))
    kept = log_softmax_rows(logits, ws)[0].clone()
    log_softmax_rows(torch.zeros(5, 300), ws)  # reuses the buffer: earlier rows unchanged
    torch.testing.assert_close(log_softmax_rows(logits, ws)[0], kept)


class Head(torch.nn.Module):
    def __init__(self, head: torch.nn.Module) -> None:
        super().__init__()
        self.head = head

    def get_output_embeddings(self):
        return self.head

    def forward(self, x):
        return self.head(x) * 2.0  # post-processing after the head, like soft-capping


@pytest.mark.parametrize("bias", [False, True])
def test_logits_into_writes_the_buffer_and_computes_the_same(bias):
    torch.manual_seed(0)
    model = Head(torch.nn.Linear(8, 40, bias=bias))
    x = torch.randn(3, 1, 8)
    expected = model(x)
    ws = Workspace(keep_bytes=1 << 20)
    with torch.no_grad(), logits_into(model, ws):
        got = model(x)
        assert "forward" in vars(model.head)
    assert "forward" not in vars(model.head)  # restored
    torch.testing.assert_close(got, expected)
    assert ws.nbytes > 0


def test_logits_into_leaves_other_heads_alone():
    class Wrapped(torch.nn.Linear):
        pass

    hooked = torch.nn.Linear(8, 40)
    hooked.register_forward_hook(lambda *a: None)
    for head in (Wrapped(8, 40), hooked):
        model = Head(head)
        ws = Workspace(keep_bytes=1 << 20)
        with torch.no_grad(), logits_into(model, ws):
            model(torch.randn(2, 1, 8))
        assert ws.nbytes == 0
    plain = Head(torch.nn.Linear(8, 40))
    with logits_into(plain, ws):  # autograd on: left alone
        assert "forward" not in vars(plain.head)


@pytest.mark.parametrize("onednn", [False, True])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("helper_late", [False, True])
def test_work_shared_with_a_helper_thread_computes_the_same(bias, helper_late, onednn):
    import concurrent.futures
    import time

    from genlm_hf._logits import MIN_SPLIT_ROWS

    torch.manual_seed(0)
    model = Head(torch.nn.Linear(8, 5000, bias=bias))  # several column blocks of 64 rows
    x = torch.randn(64, 1, 8)
    with torch.no_grad():
        expected = model(x)
    with concurrent.futures.ThreadPoolExecutor(
        1, initializer=set_thread_torch_threads, initargs=(1,)
    ) as helper:
        if helper_late:  # its core busy elsewhere: this thread takes more of the blocks
            helper.submit(time.sleep, 0.01)
        ws = Workspace(keep_bytes=1 << 24)
        with torch.no_grad(), logits_into(model, ws, helper, onednn):
            got = model(x)
        logits = torch.randn(MIN_SPLIT_ROWS * 2 + 3, 300)  # a short last block of rows
        rows = log_softmax_rows(logits, Workspace(keep_bytes=1 << 20), helper)
        pool = RowPool(300, max_free_bytes=1 << 20)
        pooled = log_softmax_rows(logits, Workspace(keep_bytes=1 << 20), helper, pool)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)  # oneDNN: other rounding
    torch.testing.assert_close(torch.stack(rows), torch.log_softmax(logits, -1))
    torch.testing.assert_close(torch.stack(pooled), torch.log_softmax(logits, -1))
    assert all(pool.owns(row) for row in pooled)
    # Each pooled row's maximum was noted as it was written, for the model's row check.
    assert pool.take_maxima(pooled) == [float(row.max()) for row in pooled]


def test_small_cpu_models_get_a_helper_thread(hf_models):
    lm = hf_models("tiny-gpt2").lm()
    assert (lm._helper is not None) == (len(os.sched_getaffinity(0)) > 1)
    big = hf_models("tiny-gpt2").lm(worker_threads=2)
    assert big._helper is None
    lm.cleanup()
    big.cleanup()
    assert lm._helper is None  # shut down with the model


@pytest.mark.parametrize("batched", [True, False])
def test_gathered_pasts_are_left_padded_with_zeros(batched):
    """Padding reads a slot holding nan; the buffer's padding must still be 0."""
    from genlm_hf._forward import ForwardInput, _gather_pasts

    copy_bytes = 8 << 20 if batched else 0  # 0: the row-by-row path for big batches
    layers2, heads, dim = 4, 2, 3
    pool = torch.randn(layers2, heads, 20, dim)
    pool[:, :, 0] = float("nan")
    rows = [
        ForwardInput((1,) * 6, [(5, 3), (10, 2)], 5),  # two runs
        ForwardInput((2,) * 3, [(15, 2)], 2),  # one run
        ForwardInput((3,), [], 0),  # no past
        ForwardInput(
            (4,) * 5, [(2, 2), (17, 2)], 4
        ),  # two runs again: its slots follow the first's
    ]
    width_past = 5
    buffer = torch.full((layers2, 4, heads, width_past + 1, dim), 7.0)
    _gather_pasts(buffer, rows, width_past, pool, copy_bytes)
    assert torch.equal(buffer[:, 0, :, :5], torch.cat([pool[:, :, 5:8], pool[:, :, 10:12]], 2))
    assert torch.equal(buffer[:, 1, :, 3:5], pool[:, :, 15:17])
    assert torch.equal(buffer[:, 1, :, :3], torch.zeros(layers2, heads, 3, dim))
    assert torch.equal(buffer[:, 2, :, :5], torch.zeros(layers2, heads, 5, dim))
    assert torch.equal(buffer[:, 3, :, 1:5], torch.cat([pool[:, :, 2:4], pool[:, :, 17:19]], 2))
    assert torch.equal(buffer[:, 3, :, :1], torch.zeros(layers2, heads, 1, dim))
    assert torch.equal(buffer[:, :, :, 5], torch.full((layers2, 4, heads, dim), 7.0))  # new slots
