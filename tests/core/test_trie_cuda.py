"""The torch trie (``torch-cuda``): device inputs, NaN checks, owned outputs, chunks.

Every test of the class's logic runs on ``device="cpu"`` (same code as CUDA, without
streams or page-locked memory); the ``cuda`` tests repeat what only a GPU can show,
against genlm-backend 0.3.1's ``ParallelTokenCharacterTrie(device="cuda")``.

Sums are float32 and genlm-backend adds in another order, so they are compared with
the exact (float64) sums of the same weights: a sum of n non-negative terms, added in
any order, is within gamma_n = n u / (1 - n u) of its value, relatively (u = 2**-24;
Higham, Accuracy and Stability of Numerical Algorithms, 4.2), n being the number of
vocabulary entries below the node. Maxima are exact, so they must be equal.
"""

from __future__ import annotations

import gc
import threading
import warnings

import numpy as np
import pytest
import torch
from genlm.backend.tokenization import Token as BackendToken
from genlm.backend.trie import ParallelTokenCharacterTrie as BackendParallelTrie

from genlm_core.tokenization import Token
from genlm_core.trie import InvalidWeightsError, TokenCharacterTrie, TorchTokenCharacterTrie

# gc.collect() here needs to see only what each test made (see conftest.young_gc).
pytestmark = pytest.mark.usefixtures("young_gc")

WORDS = [b"a", b"ab", b"abc", b"b", b"ba", b"", b"c", b"cab", b"</s>", b"ab"]
U = 2.0**-24


def make(device="cpu", **kwargs):
    return TorchTokenCharacterTrie([Token(i, w) for i, w in enumerate(WORDS)], device, **kwargs)


def synthetic_vocab(n=3000, seed=0):
    """A vocabulary shaped like a real one: every byte, then longer words over a skewed
    alphabet (shared prefixes), some spelled alike under different ids, some empty."""
    rng = np.random.default_rng(seed)
    words = [bytes([b]) for b in range(256)]
    letters = np.frombuffer(b" etaoinshrdlu\xc3\xa9\xff\x00", dtype=np.uint8)
    p = np.linspace(3, 1, len(letters))
    for _ in range(n):
        size = int(rng.integers(1, 12))
        words.append(bytes(rng.choice(letters, size=size, p=p / p.sum()).tolist()))
    words += [b"", b"", b" the"]
    return [Token(i, w) for i, w in enumerate(words)]


def weights(rows, size, seed=0):
    """Log-probs of ``rows`` peaked random distributions, float32."""
    gen = torch.Generator().manual_seed(seed)
    return torch.log_softmax(3 * torch.randn(rows, size, generator=gen), dim=1)


def assert_same(op, have, want):
    """Equal maxima; sums equal to rounding: their order depends on how many rows a
    sparse product computes together (it vectorises across them)."""
    if op == "max":
        np.testing.assert_array_equal(have, want)
    else:
        np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-30)


def assert_sums_within_bound(masses, exact, n_below):
    gamma = n_below * U / (1 - n_below * U)
    err = np.abs(np.asarray(masses, dtype=np.float64) - exact)
    worst = np.argmax(err - gamma * exact)
    assert np.all(err <= gamma * exact + n_below * 2.0**-149), (
        f"node {worst % exact.shape[-1]}: {masses.flat[worst]} vs exact {exact.flat[worst]}"
    )


# -- inputs on the trie's device ---------------------------------------------------------------


@pytest.mark.parametrize("op", ["sum", "max"])
def test_tensors_on_the_device_give_the_numpy_results(op):
    trie = make()
    ws = weights(4, len(WORDS)).exp()
    one, many = getattr(trie, f"weight_{op}"), getattr(trie, f"batch_weight_{op}")
    want = many(ws.numpy())
    np.testing.assert_array_equal(many(ws), want)
    np.testing.assert_array_equal(many(list(ws)), want)  # a list of device tensors
    np.testing.assert_array_equal(many(tuple(ws)), want)
    np.testing.assert_array_equal(one(ws[2]), one(ws[2].numpy()))
    assert_same(op, one(ws[2]), want[2])
    np.testing.assert_allclose(many(ws.double()), want, rtol=1e-6)  # converted on the device
    np.testing.assert_allclose(many(ws.requires_grad_()), want, rtol=1e-6)


def test_device_tensors_of_other_dtypes_are_converted_as_on_the_host():
    trie = make()
    ints = torch.arange(len(WORDS))
    np.testing.assert_array_equal(trie.weight_sum(ints), trie.weight_sum(ints.numpy()))
    half = torch.linspace(0, 1, len(WORDS), dtype=torch.bfloat16)
    np.testing.assert_array_equal(trie.weight_max(half), trie.weight_max(half.float().numpy()))
    float64 = make(dtype=torch.float64)
    masses = float64.batch_weight_sum(torch.ones(2, len(WORDS), dtype=torch.float64))
    assert masses.dtype == np.float64 and masses[0, float64.root] == len(WORDS)


def test_bad_device_tensors_raise_the_host_messages():
    trie = make()
    v = len(WORDS)
    cases = [
        ("weight_sum", torch.ones(v - 1), np.ones(v - 1)),
        ("weight_sum", torch.ones(2, v), np.ones((2, v))),
        ("weight_max", torch.tensor(1.0), np.float64(1.0)),
        ("batch_weight_sum", torch.ones(v), np.ones(v)),
        ("batch_weight_max", torch.ones(2, v + 1), np.ones((2, v + 1))),
        ("batch_weight_sum", torch.ones(1, 2, v), np.ones((1, 2, v))),
        ("batch_weight_sum", [torch.ones(v), torch.ones(v + 1)], [np.ones(v), np.ones(v + 1)]),
        ("weight_sum", torch.ones(v, dtype=torch.complex64), None),
        ("batch_weight_sum", torch.ones(2, v, dtype=torch.bool), None),
    ]
    for method, tensor, array in cases:
        with pytest.raises(InvalidWeightsError) as on_device:
            getattr(trie, method)(tensor)
        if array is None:
            assert "must be real numbers, got a torch tensor of dtype" in str(on_device.value)
            continue
        with pytest.raises(InvalidWeightsError) as on_host:
            getattr(trie, method)(array)
        assert str(on_device.value) == str(on_host.value)


@pytest.mark.parametrize("where", ["tensor", "numpy", "list"])
def test_nan_names_the_entry_and_the_row(where):
    trie = make(max_batch_size=2)  # the NaN is in the second chunk
    ws = torch.ones(5, len(WORDS))
    ws[3, 4] = ws[3, 7] = float("nan")
    batch = {"tensor": ws, "numpy": ws.numpy(), "list": list(ws)}[where]
    with pytest.raises(InvalidWeightsError, match=r"entry 4 \(.*b'ba'.* in batch row 3 is NaN"):
        trie.batch_weight_max(batch)
    with pytest.raises(InvalidWeightsError, match=r"weight_sum: .*entry 4 .*is NaN"):
        trie.weight_sum(batch[3])
    trie.batch_weight_sum(ws[:3])  # the trie is still usable


def test_infinities_are_not_nans():
    trie = make()
    ws = torch.full((len(WORDS),), -torch.inf)
    ws[0] = torch.inf
    assert trie.weight_max(ws)[trie.root] == np.inf
    assert np.isnan(trie.weight_sum(torch.where(ws > 0, ws, -ws))).sum() == 0
    assert np.isnan(trie.weight_sum(ws)[trie.root])  # inf + -inf: not the input's NaN


def test_empty_batch_and_empty_vocabulary():
    trie = make()
    assert trie.batch_weight_sum(torch.ones(0, len(WORDS))).shape == (0, trie.num_nodes)
    empty = TorchTokenCharacterTrie([], device="cpu")
    assert empty.weight_sum(torch.ones(0)).tolist() == [0.0]
    assert empty.weight_max(np.ones(0)).tolist() == [-np.inf]


# -- chunks ----------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["sum", "max"])
def test_every_chunk_size_gives_the_same_masses(op):
    vocab = synthetic_vocab(300)
    ws = weights(7, len(vocab))
    ws = ws.exp() if op == "sum" else ws
    method = f"batch_weight_{op}"
    want = getattr(TorchTokenCharacterTrie(vocab, "cpu", max_batch_size=7), method)(ws)
    for size in (1, 2, 3, 4, 100):
        trie = TorchTokenCharacterTrie(vocab, "cpu", max_batch_size=size)
        assert_same(op, getattr(trie, method)(ws), want)


def test_default_chunks_hold_about_chunk_bytes_of_masses(monkeypatch):
    from genlm_trie_torch import torch_trie

    trie = make()
    assert trie._chunk_rows() == torch_trie.CHUNK_BYTES // (trie.num_nodes * 4)
    monkeypatch.setattr(torch_trie, "CHUNK_BYTES", 1)
    assert trie._chunk_rows() == 1
    assert make(max_batch_size=5)._chunk_rows() == 5


def test_long_rows_are_cut_into_pieces(monkeypatch):
    from genlm_trie_torch import torch_trie

    monkeypatch.setattr(torch_trie, "ROW_LIMIT", 3)  # the root has 3259 entries below
    vocab = synthetic_vocab()
    ws = weights(3, len(vocab)).exp()
    exact = TokenCharacterTrie(vocab)
    want = exact.batch_weight_sum(ws.double().numpy())
    wide = TorchTokenCharacterTrie(vocab, "cpu", dtype=torch.float64)
    assert wide._pieces is not None and wide._reach.crow_indices().diff().max() <= 3
    np.testing.assert_allclose(wide.batch_weight_sum(ws.double()), want, rtol=1e-12)
    narrow = TorchTokenCharacterTrie(vocab, "cpu")
    assert_sums_within_bound(
        narrow.batch_weight_sum(ws), want, exact.weight_sum(np.ones(len(vocab)))
    )


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "8"])
def test_max_batch_size_is_checked(bad):
    with pytest.raises(ValueError, match="max_batch_size must be None or an integer >= 1"):
        make(max_batch_size=bad)


# -- outputs are the caller's ------------------------------------------------------------------


def test_a_returned_array_is_never_overwritten_while_held():
    trie = make()
    first = trie.batch_weight_sum(np.ones((3, len(WORDS))))
    single = trie.weight_sum(np.ones(len(WORDS)))
    view = trie.batch_weight_max(np.zeros((3, len(WORDS))))[1:]  # the array is dropped, a view kept
    kept = first.copy(), single.copy(), view.copy()
    for _ in range(3):
        trie.batch_weight_sum(np.full((3, len(WORDS)), 7.0))
        trie.weight_sum(np.full(len(WORDS), 7.0))
        as_tensor = torch.from_numpy(trie.batch_weight_max(np.full((3, len(WORDS)), 5.0)))
    gc.collect()
    np.testing.assert_array_equal(first, kept[0])
    np.testing.assert_array_equal(single, kept[1])
    np.testing.assert_array_equal(view, kept[2])
    assert as_tensor[0, trie.root] == 5.0


def test_dropped_outputs_are_reused():
    trie = make()
    first = trie.batch_weight_sum(np.ones((3, len(WORDS))))
    address = first.ctypes.data
    second = trie.batch_weight_sum(np.ones((3, len(WORDS))))
    assert second.ctypes.data != address
    del first
    gc.collect()
    assert trie.batch_weight_max(np.ones((3, len(WORDS)))).ctypes.data == address


def test_a_tensor_over_an_output_keeps_it():
    trie = make()
    tensor = torch.from_numpy(trie.batch_weight_sum(np.ones((2, len(WORDS)))))
    gc.collect()
    again = trie.batch_weight_sum(np.zeros((2, len(WORDS))))
    assert again.ctypes.data != tensor.data_ptr()
    assert tensor[0, trie.root] == len(WORDS)


def test_concurrent_calls_get_their_own_masses():
    vocab = synthetic_vocab(200)
    trie = TorchTokenCharacterTrie(vocab, "cpu", max_batch_size=2)
    ws = [weights(5, len(vocab), seed=s).exp() for s in range(4)]
    want = [trie.batch_weight_sum(w) for w in ws]
    errors = []

    def work(i):
        try:
            for _ in range(10):
                np.testing.assert_array_equal(trie.batch_weight_sum(ws[i]), want[i])
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


# -- against genlm-backend and the exact masses ------------------------------------------------


def backend_vocab(vocab):
    return [BackendToken(t.token_id, bytes(t)) for t in vocab]


def check_against_genlm_backend(vocab, device, rows=4):
    ours = TorchTokenCharacterTrie(vocab, device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's "sparse CSR support is in beta"
        theirs = BackendParallelTrie(backend_vocab(vocab), device=device)
    exact = TokenCharacterTrie(vocab)  # float64 numba kernels
    n_below = exact.weight_sum(np.ones(len(vocab)))
    logp = weights(rows, len(vocab), seed=1)
    probs = logp.exp()
    want_sum = exact.batch_weight_sum(probs.double().numpy())
    want_max = exact.batch_weight_max(logp.double().numpy()).astype(np.float32)
    for p, lp in ((probs, logp), (probs.to(device), logp.to(device))):
        sums = ours.batch_weight_sum(p)
        assert isinstance(sums, np.ndarray) and sums.dtype == np.float32
        assert_sums_within_bound(sums, want_sum, n_below)
        assert_sums_within_bound(ours.weight_sum(p[1]), want_sum[1], n_below)
        assert_sums_within_bound(theirs.batch_weight_sum(p), want_sum, n_below)
        np.testing.assert_array_equal(ours.batch_weight_max(lp), want_max)
        np.testing.assert_array_equal(ours.weight_max(lp[1]), want_max[1])
        np.testing.assert_array_equal(theirs.batch_weight_max(lp), want_max)


def test_masses_are_genlm_backends_on_the_cpu(decoded_vocab):
    check_against_genlm_backend(synthetic_vocab(), "cpu")
    gpt2 = decoded_vocab("gpt2-npm")[0][:5000]
    check_against_genlm_backend(gpt2, "cpu", rows=2)


# -- CUDA ------------------------------------------------------------------------------------------


@pytest.mark.cuda
def test_cuda_masses_are_genlm_backends_on_a_real_vocabulary(decoded_vocab):
    check_against_genlm_backend(synthetic_vocab(), "cuda")
    check_against_genlm_backend(decoded_vocab("gpt2-npm")[0], "cuda", rows=60)  # 2 chunks of 56


@pytest.mark.cuda
@pytest.mark.parametrize("op", ["sum", "max"])
def test_cuda_tensors_give_the_host_results(op):
    vocab = synthetic_vocab()
    ws = weights(11, len(vocab))
    ws = ws.exp() if op == "sum" else ws
    for size in (None, 1, 2, 4):  # 11 chunks of 1: the ring of device buffers wraps around
        trie = TorchTokenCharacterTrie(vocab, "cuda", max_batch_size=size)
        many, one = getattr(trie, f"batch_weight_{op}"), getattr(trie, f"weight_{op}")
        want = many(ws)  # CPU tensor: through the page-locked staging block
        assert isinstance(want, np.ndarray) and want.dtype == np.float32
        # Sums to rounding: on an H100, cuSPARSE's product gave 1-ulp differences in 88 of
        # 168k sums between host- and device-weight calls of the same chunking.
        assert_same(op, many(ws.cuda()), want)
        assert_same(op, many(ws.numpy()), want)
        assert_same(op, many(list(ws.cuda())), want)
        assert_same(op, one(ws[3].cuda()), one(ws[3]))
        assert_same(op, one(ws[3]), want[3])
        cpu = TorchTokenCharacterTrie(vocab, "cpu", max_batch_size=size)
        assert_same(op, getattr(cpu, f"batch_weight_{op}")(ws), want)


@pytest.mark.cuda
def test_cuda_outputs_are_page_locked_owned_and_reused():
    trie = TorchTokenCharacterTrie(synthetic_vocab(), "cuda", max_batch_size=2)
    ws = weights(5, len(trie.decode)).exp().cuda()
    first = trie.batch_weight_sum(ws)
    assert torch.from_numpy(first).is_pinned(), "masses should land in page-locked memory"
    kept = first.copy()
    # Each result below is dropped at once: one page-locked block serves them all.
    addresses = {trie.batch_weight_sum(ws * 0.5).ctypes.data for _ in range(4)}
    assert len(addresses) == 1 and first.ctypes.data not in addresses
    np.testing.assert_array_equal(first, kept)


@pytest.mark.cuda
def test_cuda_nan_and_bad_shapes_are_caught_on_the_device():
    trie = TorchTokenCharacterTrie(synthetic_vocab(), "cuda", max_batch_size=2)
    ws = torch.ones(5, len(trie.decode), device="cuda")
    ws[4, 300] = float("nan")
    with pytest.raises(InvalidWeightsError, match=r"entry 300 .* in batch row 4 is NaN"):
        trie.batch_weight_sum(ws)
    with pytest.raises(InvalidWeightsError, match=r"got shape \(5, 3258\)"):
        trie.batch_weight_max(ws[:, 1:])
    masses = trie.batch_weight_max(ws[:4].half())
    assert masses[0, trie.root] == 1.0


@pytest.mark.cuda
def test_cuda_float64_is_the_exact_cpu_result():
    vocab = synthetic_vocab()
    ws = weights(3, len(vocab)).double().exp()
    gpu = TorchTokenCharacterTrie(vocab, "cuda", dtype=torch.float64).batch_weight_sum(ws.cuda())
    exact = TokenCharacterTrie(vocab).batch_weight_sum(ws.numpy())
    assert gpu.dtype == np.float64
    np.testing.assert_allclose(gpu, exact, rtol=1e-12)
