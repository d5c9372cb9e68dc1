"""LoRA adapters in mlx-lm's format: made locally (non-zero weights), saved, loaded.

Each adapter's outputs must differ from the base model's, equal those of a model whose
weights have the adapter merged in (``W + scale * (A @ B).T``), and equal those of
mlx-lm's own loader (``load_adapters``) on a fresh copy; requests for several adapters
in one batch are grouped per adapter and cached per adapter.
"""

from __future__ import annotations

import asyncio
import json

import pytest
import torch
from session_requires import require

require("mlx_lm", reason="mlx and mlx-lm are not installed (nox -s mlx installs them)")

from genlm_mlx.lm import AsyncMlxLM  # noqa: E402, I001  (first: it picks mlx's BLAS)

import mlx.core as mx  # noqa: E402
from genlm_core.errors import UnknownLoraError  # noqa: E402
from genlm_core.testing import LoraConformance  # noqa: E402
from genlm_mlx._loading import ModelLoadError  # noqa: E402

ATOL = 1e-4
KEYS = ["self_attn.q_proj", "self_attn.v_proj", "mlp.down_proj"]
PROMPTS = [[5, 6, 7], [5, 6, 7, 8, 9], [100, 200], [42] * 20, [5, 6, 7]]


def make_adapter(model, path, seed: int, rank: int = 4, scale: float = 2.0):
    """Save a random adapter for every layer's KEYS; return its weights by module path."""
    mx.random.seed(seed)
    weights = {}
    for i, layer in enumerate(model.layers):
        modules = dict(layer.named_modules())
        for key in KEYS:
            lin = modules[key]
            lin = getattr(lin, "base", lin)
            out_dims, in_dims = lin.weight.shape
            prefix = f"model.layers.{i}.{key}"
            weights[f"{prefix}.lora_a"] = 0.2 * mx.random.normal((in_dims, rank))
            weights[f"{prefix}.lora_b"] = 0.2 * mx.random.normal((rank, out_dims))
    path.mkdir()
    mx.save_safetensors(str(path / "adapters.safetensors"), weights)
    config = {
        "fine_tune_type": "lora",
        "num_layers": len(model.layers),
        "lora_parameters": {"rank": rank, "scale": scale, "dropout": 0.0, "keys": KEYS},
    }
    (path / "adapter_config.json").write_text(json.dumps(config))
    return weights, scale


def merged_lm(path, weights, scale) -> AsyncMlxLM:
    """A fresh model with the adapter folded into its weights."""
    lm = AsyncMlxLM.from_name(path, cache_size=0)
    modules = dict(lm.model.named_modules())
    for key, a in weights.items():
        if key.endswith(".lora_a"):
            prefix = key[: -len(".lora_a")]
            b = weights[f"{prefix}.lora_b"]
            lin = modules[prefix]
            lin.weight = lin.weight + scale * (a @ b).T
    mx.eval(lm.model.parameters())
    return lm


@pytest.fixture
def tiny(asset_model_dir):
    return str(asset_model_dir("tiny-llama3"))


async def test_adapters_change_outputs_and_equal_merged_weights(tiny, tmp_path):
    lm = AsyncMlxLM.from_name(tiny)
    w1, s1 = make_adapter(lm.model, tmp_path / "a1", seed=1)
    w2, s2 = make_adapter(lm.model, tmp_path / "a2", seed=2, scale=0.5)
    base = [lm.next_token_logprobs_uncached(p) for p in PROMPTS]
    lm.add_new_lora(str(tmp_path / "a1"), "one")
    lm.add_new_lora(str(tmp_path / "a2"), "two")
    assert lm.lora_names == ["one", "two"]
    # one batch mixing the base model and both adapters
    got = await asyncio.gather(
        *(
            lm.next_token_logprobs(p, lora_name=name)
            for name in (None, "one", "two")
            for p in PROMPTS
        )
    )
    n = len(PROMPTS)
    for i in range(n):
        torch.testing.assert_close(got[i], base[i], atol=ATOL, rtol=0)
        assert (got[n + i] - base[i]).abs().max() > 0.01  # the adapter does something
    for offset, (weights, scale) in ((n, (w1, s1)), (2 * n, (w2, s2))):
        with merged_lm(tiny, weights, scale) as merged:
            for i, p in enumerate(PROMPTS):
                torch.testing.assert_close(
                    got[offset + i], merged.next_token_logprobs_sync(p), atol=ATOL, rtol=0
                )
    # prefix reuse is per adapter: extensions of the same prompts stay right
    for name in ("one", None):
        for p in PROMPTS:
            ext = p + [9, 10]
            torch.testing.assert_close(
                await lm.next_token_logprobs(ext, lora_name=name),
                lm.next_token_logprobs_uncached(ext, lora_name=name),
                atol=ATOL,
                rtol=0,
            )
    lm.remove_lora("one")
    with pytest.raises(UnknownLoraError, match="'one'"):
        await lm.next_token_logprobs(PROMPTS[0], lora_name="one")
    torch.testing.assert_close(
        await lm.next_token_logprobs(PROMPTS[0], lora_name="two"), got[2 * n], atol=ATOL, rtol=0
    )
    torch.testing.assert_close(lm.next_token_logprobs_sync(PROMPTS[1]), base[1], atol=ATOL, rtol=0)
    lm.cleanup()


def test_same_as_mlx_lm_loader(tiny, tmp_path):
    from mlx_lm.tuner.utils import load_adapters

    lm = AsyncMlxLM.from_name(tiny, cache_size=0)
    make_adapter(lm.model, tmp_path / "a", seed=3)
    lm.add_new_lora(str(tmp_path / "a"), "a")
    with AsyncMlxLM.from_name(tiny, cache_size=0, kv_cache_bytes=0) as ref:
        load_adapters(ref.model, str(tmp_path / "a"))
        ref.model.eval()
        for p in PROMPTS:
            torch.testing.assert_close(
                lm.next_token_logprobs_sync(p, lora_name="a"),
                ref.next_token_logprobs_sync(p),
                atol=ATOL,
                rtol=0,
            )
    lm.cleanup()


def test_replacing_an_adapter_drops_its_caches(tiny, tmp_path):
    with AsyncMlxLM.from_name(tiny) as lm:
        make_adapter(lm.model, tmp_path / "a", seed=4)
        make_adapter(lm.model, tmp_path / "b", seed=5)
        lm.add_new_lora(str(tmp_path / "a"), "x")
        first = lm.next_token_logprobs_sync(PROMPTS[1], lora_name="x")
        lm.add_new_lora(str(tmp_path / "b"), "x")
        second = lm.next_token_logprobs_sync(PROMPTS[1], lora_name="x")
        assert (first - second).abs().max() > 0.01
        torch.testing.assert_close(
            second, lm.next_token_logprobs_uncached(PROMPTS[1], lora_name="x"), atol=ATOL, rtol=0
        )


def test_bad_adapters_are_refused(tiny, tmp_path):
    with AsyncMlxLM.from_name(tiny) as lm:
        with pytest.raises(ModelLoadError, match="adapter_config.json"):
            lm.add_new_lora(str(tmp_path / "missing"), "m")
        dora = tmp_path / "dora"
        make_adapter(lm.model, dora, seed=6)
        config = json.loads((dora / "adapter_config.json").read_text())
        (dora / "adapter_config.json").write_text(json.dumps({**config, "fine_tune_type": "dora"}))
        with pytest.raises(ModelLoadError, match="fine_tune_type='dora'"):
            lm.add_new_lora(str(dora), "d")
        wrong = tmp_path / "wrong"
        wrong.mkdir()
        mx.save_safetensors(
            str(wrong / "adapters.safetensors"),
            {
                "model.layers.0.self_attn.q_proj.lora_a": mx.ones((64, 2)),
                "model.layers.0.self_attn.q_proj.lora_b": mx.ones((2, 7)),
            },
        )
        (wrong / "adapter_config.json").write_text(json.dumps({"lora_parameters": {"scale": 1.0}}))
        with pytest.raises(ModelLoadError, match="do not fit"):
            lm.add_new_lora(str(wrong), "w")
        assert lm.lora_names == []


class TestAdapterConformance(LoraConformance):
    """The shipped LoRA suite on mlx: replaced and removed adapters never served stale."""

    @pytest.fixture
    def lm(self, tiny):
        model = AsyncMlxLM.from_name(tiny)
        yield model
        model.cleanup()

    @pytest.fixture
    def lora_adapters(self, lm, tmp_path):
        make_adapter(lm.model, tmp_path / "v1", seed=1)
        make_adapter(lm.model, tmp_path / "v2", seed=2, scale=0.5)
        return str(tmp_path / "v1"), str(tmp_path / "v2")
