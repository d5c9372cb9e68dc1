"""Attention over the slot pool (issue 42's first point): forwards that read pasts in place.

A forward whose cache is a `PoolCache` and whose attention is ``"genlm_pool"`` must
compute what plain forwards of the whole sequences compute, on every architecture the
prefix cache serves (grouped-query heads, Gemma-2's sliding window and soft-capping,
GPT-2's absolute positions), with pasts scattered over the pool and padding anywhere.
float32 on the CPU; the tolerance is a few float32 ulps of a logit (accumulation order).
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
from session_requires import require

require("genlm_hf.lm", reason="genlm-hf is not installed")

from tiny_architectures import ARCHITECTURES, arch_model  # noqa: E402

from genlm_hf._forward import cache_argument  # noqa: E402
from genlm_hf._pool_attention import (  # noqa: E402
    ATTENTION,
    PoolBatch,
    PoolCache,
    pool_attention_on,
    pool_batch,
    reference_attention,
)

VOCAB = 101
ATOL = 2e-5


def tiny(arch: str) -> Any:
    """The architecture's tiny model; Gemma-2's score capping made tight enough to act."""
    model = arch_model(arch, VOCAB, torch.float32, "cpu")
    for module in model.modules():
        if getattr(module, "attn_logit_softcapping", None) is not None:
            module.attn_logit_softcapping = 0.5  # (50 leaves random weights' scores alone)
    return model


def kv_layout(model: Any) -> tuple[int, int, int]:
    """(layers, key/value heads, head_dim), read from a one-token forward's cache."""
    from transformers import DynamicCache

    cache = DynamicCache()
    with torch.no_grad():
        model(
            torch.zeros((1, 1), dtype=torch.long), use_cache=True, **{cache_argument(model): cache}
        )
    keys = cache.layers[0].keys
    return len(cache.layers), keys.shape[1], keys.shape[3]


def plain_kv(model: Any, tokens: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer, the keys and values ``(heads, len, dim)`` of a plain forward of ``tokens``."""
    from transformers import DynamicCache

    cache = DynamicCache()
    with torch.no_grad():
        model(torch.tensor([tokens]), use_cache=True, **{cache_argument(model): cache})
    return [(layer.keys[0], layer.values[0]) for layer in cache.layers]


class Pool:
    """A slot pool with the pasts of some rows stored at scattered slots (slot 0: dummy)."""

    def __init__(self, model: Any, slots: int = 256, seed: int = 0) -> None:
        layers, heads, dim = kv_layout(model)
        self.model = model
        self.tensor = torch.zeros((2 * layers, heads, slots, dim))
        self.free = list(range(1, slots))
        random.Random(seed).shuffle(self.free)  # no row's slots are consecutive

    def take(self, n: int) -> list[tuple[int, int]]:
        """``n`` scattered slots, as runs of one (and a run of two where they touch)."""
        taken = sorted(self.free.pop() for _ in range(n))
        runs: list[tuple[int, int]] = []
        for s in taken:
            if runs and runs[-1][0] + runs[-1][1] == s:
                runs[-1] = (runs[-1][0], runs[-1][1] + 1)
            else:
                runs.append((s, 1))
        return runs

    def store(self, tokens: list[int]) -> list[tuple[int, int]]:
        """Store a plain forward's keys and values of ``tokens``; their slots' runs."""
        runs = self.take(len(tokens))
        if not tokens:
            return runs
        slots = [s for start, n in runs for s in range(start, start + n)]
        for layer, (keys, values) in enumerate(plain_kv(self.model, tokens)):
            self.tensor[2 * layer][:, slots] = keys
            self.tensor[2 * layer + 1][:, slots] = values
        return runs

    def read(self, runs: list[tuple[int, int]], layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        slots = [s for start, n in runs for s in range(start, start + n)]
        return self.tensor[2 * layer][:, slots], self.tensor[2 * layer + 1][:, slots]


def in_place_forward(
    model: Any, pool: Pool, rows: list[tuple[list[int], int]], **widths: int
) -> tuple[torch.Tensor, list[list[tuple[int, int]]]]:
    """Logits ``(B, N, vocab)`` of one forward over the pool; each row's write runs."""
    pasts = [pool.store(tokens[:past]) for tokens, past in rows]
    writes = [pool.take(len(tokens) - past) for tokens, past in rows]
    batch = pool_batch(pasts, writes, dummy=0, **widths)
    width = batch.write_slots.shape[1]
    ids = [tokens[past:] + [0] * (width - len(tokens) + past) for tokens, past in rows]
    with torch.no_grad(), pool_attention_on(model):
        out = model(
            torch.tensor(ids),
            position_ids=batch.positions,
            cache=PoolCache(pool.tensor, batch),
            use_cache=True,
            pool_batch=batch,
        )
    return out.logits, writes


def sampler_rows(seed: int) -> list[tuple[list[int], int]]:
    """(tokens, cached positions): no past, one new token, several, pasts past the window."""
    rng = random.Random(seed)

    def tokens(n: int) -> list[int]:
        return [rng.randrange(1, VOCAB) for _ in range(n)]

    return [(tokens(13), 12), (tokens(4), 0), (tokens(20), 15), (tokens(9), 5), (tokens(2), 1)]


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
def test_in_place_forward_equals_plain_forwards(arch: str) -> None:
    model = tiny(arch)
    pool = Pool(model)
    rows = sampler_rows(seed=1)
    logits, writes = in_place_forward(model, pool, rows)
    for i, (tokens, past) in enumerate(rows):
        with torch.no_grad():
            plain = model(torch.tensor([tokens])).logits[0, past:]
        torch.testing.assert_close(logits[i, : len(tokens) - past], plain, atol=ATOL, rtol=0)
        # the new positions' keys and values are in their slots: nothing to store back
        for layer, (keys, values) in enumerate(plain_kv(model, tokens)):
            got_k, got_v = pool.read(writes[i], layer)
            torch.testing.assert_close(got_k, keys[:, past:], atol=ATOL, rtol=0)
            torch.testing.assert_close(got_v, values[:, past:], atol=ATOL, rtol=0)


@pytest.mark.parametrize("arch", ["llama", "gemma2"])
def test_padding_to_a_bucket_changes_no_row(arch: str) -> None:
    """Rows padded to a larger bucket (a CUDA graph's shape) compute the same logits."""
    model = tiny(arch)
    rows = sampler_rows(seed=2)
    exact, _ = in_place_forward(model, Pool(model), rows)
    padded, _ = in_place_forward(model, Pool(model, seed=3), rows, new_width=16, kv_width=48)
    for i, (tokens, past) in enumerate(rows):
        n = len(tokens) - past
        torch.testing.assert_close(padded[i, :n], exact[i, :n], atol=ATOL, rtol=0)


def test_a_forward_extends_what_an_earlier_one_wrote() -> None:
    """Decode steps: each step's new position is read in place by the next."""
    model = tiny("llama")
    pool = Pool(model)
    rng = random.Random(4)
    tokens = [[rng.randrange(1, VOCAB) for _ in range(6)] for _ in range(3)]
    runs = [pool.store(t[:5]) for t in tokens]
    for _ in range(4):
        writes = [pool.take(1) for _ in tokens]
        batch = pool_batch(runs, writes, dummy=0)
        ids = torch.tensor([[t[-1]] for t in tokens])
        with torch.no_grad(), pool_attention_on(model):
            out = model(ids, position_ids=batch.positions, cache=PoolCache(pool.tensor, batch),
                        use_cache=True, pool_batch=batch)  # fmt: skip
        for i, t in enumerate(tokens):
            with torch.no_grad():
                plain = model(torch.tensor([t])).logits[0, -1]
            torch.testing.assert_close(out.logits[i, 0], plain, atol=ATOL, rtol=0)
            runs[i] = runs[i] + writes[i]
            t.append(int(plain.argmax()))


def test_pool_batch_index_arrays() -> None:
    batch = pool_batch([[(10, 2)], []], [[(20, 1)], [(30, 2), (40, 1)]], dummy=0)
    assert batch.write_slots.tolist() == [[20, 0, 0], [30, 31, 40]]
    assert batch.kv_slots.tolist() == [[10, 11, 20], [30, 31, 40]]
    assert batch.kv_lens.tolist() == [3, 3]
    assert batch.positions.tolist() == [[2, 2, 2], [0, 1, 2]]  # padding repeats the last
    assert batch.past_width == 2


@pytest.mark.parametrize(
    ("pasts", "writes", "widths", "match"),
    [
        ([[]], [[]], {}, "at least one new position"),
        ([[], []], [[(1, 1)]], {}, "one past and one write per row"),
        ([[(1, 4)]], [[(9, 2)]], {"new_width": 1}, "smaller than the batch needs"),
        ([[(1, 4)]], [[(9, 2)]], {"kv_width": 5}, "smaller than the batch needs"),
    ],
)
def test_pool_batch_rejects_what_it_cannot_index(pasts, writes, widths, match) -> None:
    with pytest.raises(ValueError, match=match):
        pool_batch(pasts, writes, dummy=0, **widths)


def test_outside_an_in_place_forward_the_attention_says_so() -> None:
    model = tiny("llama")
    with torch.no_grad(), pool_attention_on(model), pytest.raises(RuntimeError, match=ATTENTION):
        model(torch.tensor([[1, 2, 3]]))
    assert model.config._attn_implementation != ATTENTION  # put back after the block
    model(torch.tensor([[1, 2, 3]]))  # and plain forwards work again


def test_the_attention_traces_as_one_graph() -> None:
    """No graph break in the kernel: what a captured decode step needs (issue 42)."""
    torch.manual_seed(0)
    heads, kv_heads, dim, slots = 4, 2, 8, 64
    pool_k, pool_v = torch.randn(kv_heads, slots, dim), torch.randn(kv_heads, slots, dim)
    batch = pool_batch([[(1, 5)], [(10, 3)]], [[(20, 1)], [(30, 1)]], dummy=0)
    query = torch.randn(2, heads, 1, dim)

    def kernel(q: torch.Tensor, b: PoolBatch) -> torch.Tensor:
        return reference_attention(q, pool_k, pool_v, b, dim**-0.5, sliding_window=4)

    explained = torch._dynamo.explain(kernel)(query, batch)
    assert explained.graph_break_count == 0, explained.break_reasons
    torch.testing.assert_close(
        torch.compile(kernel, backend="eager", fullgraph=True)(query, batch), kernel(query, batch)
    )


def test_an_in_place_forward_traces_as_one_graph() -> None:
    """The whole model's forward over the pool: one graph, no break (what capture needs)."""
    model = tiny("llama")
    pool = Pool(model, slots=64)
    batch = pool_batch([[(1, 5)], [(10, 3)]], [[(20, 1)], [(30, 1)]], dummy=0)

    def step(ids: torch.Tensor) -> torch.Tensor:
        with pool_attention_on(model):
            out = model(
                ids,
                position_ids=batch.positions,
                cache=PoolCache(pool.tensor, batch),
                use_cache=True,
                pool_batch=batch,
                logits_to_keep=1,
            )
        return out.logits

    with torch.no_grad():
        explained = torch._dynamo.explain(step)(torch.tensor([[5], [6]]))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
