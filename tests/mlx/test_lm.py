"""AsyncMlxLM on real weights: the conformance suite, hf agreement, prefix reuse, loading."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest
import torch
from session_requires import require

require("mlx_lm", reason="mlx and mlx-lm are not installed (nox -s mlx installs them)")

from genlm_core.errors import ModelNotFoundError  # noqa: E402
from genlm_core.testing import AsyncLMConformance  # noqa: E402
from genlm_mlx._loading import config_overrides  # noqa: E402
from genlm_mlx.lm import AsyncMlxLM  # noqa: E402

ATOL = 1e-4

# -- conformance -----------------------------------------------------------------------


class TestSmolLM2Conformance(AsyncLMConformance):
    # fp32 over 30 layers: a different batch shape changes BLAS blocking, log-probs of
    # -20 then move by a few 1e-5. The bar for batched vs single is 1e-4.
    atol = ATOL

    @pytest.fixture
    def lm(self, mlx_models):
        model = mlx_models("smollm2").lm()
        yield model
        model.cleanup()


class TestTinyLlamaSpmConformance(AsyncLMConformance):
    @pytest.fixture
    def lm(self, mlx_models):
        model = mlx_models("tiny-llama-spm").lm()
        yield model
        model.cleanup()


class TestTinyGPT2Conformance(AsyncLMConformance):
    @pytest.fixture
    def lm(self, mlx_models):
        model = mlx_models("tiny-gpt2").lm()
        yield model
        model.cleanup()


# -- known values and agreement with the hf backend -------------------------------------


def test_paris(mlx_models):
    with mlx_models("smollm2").lm() as lm:
        ids = lm.tokenizer.encode("The capital of France is")
        (paris,) = lm.tokenizer.encode(" Paris")
        assert lm.next_token_logprobs_sync(ids)[paris].item() == pytest.approx(-0.258, abs=0.01)


TEXTS = [
    "The capital of France is",
    "The capital of France is Paris, and the capital of Italy is",
    "The capital of Germany",
    "1, 2, 3, 4,",
    "Once upon a time, there was a little",
    "Once upon a time",
]


@pytest.mark.parametrize("key", ["smollm2", "tiny-llama-spm", "tiny-gpt2"])
async def test_agrees_with_hf_batched_and_cached(mlx_models, key):
    """Shared prefixes, mixed lengths, two rounds (the second extends cached prompts)."""
    hf_lm = require("genlm_hf.lm", reason="genlm-hf is not installed")
    loaded = mlx_models(key)
    ref = hf_lm.AsyncTransformer.from_name(loaded.path, byte_vocab=loaded.byte_vocab)
    with loaded.lm() as lm:
        first = [lm.tokenizer.encode(t) for t in TEXTS]
        second = [ids + [ids[-1], ids[0]] for ids in first] + [first[1][:4]]
        for prompts in (first, second):
            got = await lm.batch_next_token_logprobs(prompts)
            for ids, row in zip(prompts, got, strict=True):
                want = ref.next_token_logprobs_uncached(ids)
                torch.testing.assert_close(row, want, atol=1e-3, rtol=0)
        assert lm.kv_cache_stats.hit_tokens > 0
    ref.cleanup()


# -- prefix reuse: random prompt trees vs plain forwards ----------------------------------


def prompt_tree(seed: int, vocab: int, n: int, max_len: int = 60) -> list[list[int]]:
    """Prompts with shared prefixes (a random tree), duplicates, lengths 1..max_len."""
    rng = random.Random(seed)
    prompts: list[list[int]] = [[rng.randrange(vocab)]]
    while len(prompts) < n:
        r = rng.random()
        if r < 0.15:
            prompts.append(list(rng.choice(prompts)))
            continue
        parent = rng.choice(prompts)
        if r < 0.5:
            cut, extra = len(parent), rng.randrange(1, 4)
        elif r < 0.8:
            cut, extra = rng.randrange(0, len(parent) + 1), rng.randrange(1, 12)
        else:
            cut, extra = 0, rng.randrange(1, 20)
        new = parent[:cut] + [rng.randrange(vocab) for _ in range(extra)]
        prompts.append(new[:max_len] or [1])
    return prompts


def check_tree(lm: AsyncMlxLM, seed: int, atol: float = ATOL) -> None:
    prompts = prompt_tree(seed, lm.vocab_size, 40)
    for start in range(0, len(prompts), 10):  # four rounds: later ones reuse earlier ones
        chunk = prompts[start : start + 10]
        got = lm.batch_next_token_logprobs_sync(chunk)
        for ids, row in zip(chunk, got, strict=True):
            torch.testing.assert_close(row, lm.next_token_logprobs_uncached(ids), atol=atol, rtol=0)


@pytest.mark.parametrize("key, seed", [("tiny-llama3", 0), ("tiny-llama3", 1), ("tiny-gpt2", 2)])
def test_prefix_reuse_matches_plain_forward(mlx_models, key, seed):
    with mlx_models(key).lm(cache_size=0) as lm:
        assert lm.kv_reuse, lm.kv_reuse_off_reason
        check_tree(lm, seed)
        stats = lm.kv_cache_stats
        assert stats.hits > 0 and stats.hit_tokens > stats.hits
        assert stats.evictions == 0


def test_results_unchanged_after_eviction(mlx_models):
    loaded = mlx_models("tiny-llama3")
    per_token = loaded.lm().bytes_per_token
    with loaded.lm(cache_size=0, kv_cache_bytes=24 * per_token) as lm:
        check_tree(lm, seed=3)
        stats = lm.kv_cache_stats
        assert stats.evictions > 0
        assert stats.bytes <= 24 * per_token
        assert stats.hits > 0


def test_kv_reuse_off_is_plain_forward(mlx_models):
    with mlx_models("tiny-llama-spm").lm(cache_size=0, kv_cache_bytes=0) as lm:
        assert not lm.kv_reuse and lm.kv_reuse_off_reason == "kv_cache_bytes=0"
        check_tree(lm, seed=4)
        assert lm.kv_cache_stats.entries == 0


async def test_sampler_steps_hit_the_cache(mlx_models):
    """Particles extending one prompt token by token: each step runs one new token."""
    with mlx_models("smollm2").lm() as lm:
        prompt = lm.tokenizer.encode("Once upon a time")
        samples = await lm.batch_sample([prompt] * 4, max_tokens=4, eos_token_ids=[], seed=1)
        assert [len(s) for s in samples] == [4] * 4
        stats = lm.kv_cache_stats
        assert stats.misses == 1  # only the prompt ran without a cached past
        assert stats.hits >= 3 and stats.hit_tokens >= 3 * len(prompt)
        for s in samples:
            torch.testing.assert_close(
                await lm.next_token_logprobs(prompt + s[:3]),
                lm.next_token_logprobs_uncached(prompt + s[:3]),
                atol=ATOL,
                rtol=0,
            )


def test_context_length_is_enforced(mlx_models):
    with mlx_models("tiny-llama-spm").lm() as lm:
        n = lm.max_positions
        assert n is not None
        with pytest.raises(ValueError, match=f"context of {n} positions"):
            lm.next_token_logprobs_sync([1] * (n + 1))


# -- loading ---------------------------------------------------------------------------


def _transformers5_copy(src: Path, dst: Path) -> Path:
    """A model dir whose config has RoPE only under ``rope_parameters`` (transformers 5)."""
    dst.mkdir()
    for f in src.iterdir():
        if f.name != "config.json":
            (dst / f.name).symlink_to(f)
    config = json.loads((src / "config.json").read_text())
    theta = config.pop("rope_theta")
    config["rope_parameters"] = {"rope_theta": theta, "rope_type": "default"}
    (dst / "config.json").write_text(json.dumps(config))
    return dst


def test_rope_theta_trap_is_fixed(mlx_models, tmp_path):
    from mlx_lm.utils import load_model as mlx_load_model

    loaded = mlx_models("smollm2")  # rope_theta 100000: mlx-lm's default is 10000
    path = _transformers5_copy(Path(loaded.path), tmp_path / "smollm2-t5")
    before = (path / "config.json").read_text()
    naive, _ = mlx_load_model(path)
    assert naive.args.rope_theta == 10000  # the trap: mlx-lm alone silently misreads it
    with AsyncMlxLM.from_name(str(path)) as lm, loaded.lm() as ref:
        assert lm.model.args.rope_theta == 100000.0
        ids = lm.tokenizer.encode("The capital of France is")
        torch.testing.assert_close(
            lm.next_token_logprobs_sync(ids), ref.next_token_logprobs_sync(ids), atol=ATOL, rtol=0
        )
    assert (path / "config.json").read_text() == before  # the user's files are untouched


@pytest.mark.parametrize(
    "config, expected",
    [
        ({"rope_theta": 5.0, "rope_parameters": {"rope_theta": 5.0}}, {}),
        ({"rope_parameters": {"rope_theta": 5.0, "rope_type": "default"}}, {"rope_theta": 5.0}),
        (
            {"rope_parameters": {"rope_theta": 5e5, "rope_type": "llama3", "factor": 8.0}},
            {"rope_theta": 5e5, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}},
        ),
        (
            {
                "rope_parameters": {
                    "full_attention": {"rope_theta": 1e6, "rope_type": "default"},
                    "sliding_attention": {"rope_theta": 1e4, "rope_type": "default"},
                }
            },
            {"rope_theta": 1e6, "rope_local_base_freq": 1e4},
        ),
        ({"model_type": "gpt2"}, {}),
        ({"model_type": "gpt2", "n_positions": 64}, {"n_ctx": 64}),
        ({"model_type": "gpt2", "n_positions": 64, "n_ctx": 32}, {}),
    ],
)
def test_config_overrides(config, expected):
    assert config_overrides(config) == expected


def test_unknown_model_names_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ModelNotFoundError, match="HF_HUB_OFFLINE is set") as info:
        AsyncMlxLM.from_name("nobody/no-such-model")
    assert "load_model_by_name('smollm2-135m-instruct')" in str(info.value)


def test_missing_directory_says_so(tmp_path):
    with pytest.raises(ModelNotFoundError, match="no such directory"):
        AsyncMlxLM.from_name(str(tmp_path / "no-such-model"))


def test_bad_options(mlx_models):
    loaded = mlx_models("tiny-llama-spm")
    with pytest.raises(ValueError, match="kv_cache_bytes must be an integer >= 0"):
        loaded.lm(kv_cache_bytes=-1)
    with pytest.raises(ValueError, match="dtype must be one of"):
        AsyncMlxLM.from_name(loaded.path, dtype="float64")


async def test_cleanup_frees_and_refuses(mlx_models):
    lm = mlx_models("tiny-llama-spm").lm()
    await lm.next_token_logprobs([1, 2, 3])
    lm.cleanup()
    assert lm.model is None and lm.kv_cache_stats.entries == 0
    with pytest.raises(RuntimeError, match="was closed"):
        await asyncio.wait_for(lm.next_token_logprobs([1, 2, 3]), 5)


def test_shared_new_prefix_is_computed_once(mlx_models):
    """Many questions after one new 30-token system prompt: it is stored once."""
    with mlx_models("tiny-llama3").lm(cache_size=0) as lm:
        system = list(range(1000, 1030))
        prompts = [system + [2000 + i, 3000 + i] for i in range(6)]
        got = lm.batch_next_token_logprobs_sync(prompts)
        for ids, row in zip(prompts, got, strict=True):
            torch.testing.assert_close(row, lm.next_token_logprobs_uncached(ids), atol=ATOL, rtol=0)
        assert lm.kv_cache_stats.tokens == len(system) + 2 * len(prompts)
