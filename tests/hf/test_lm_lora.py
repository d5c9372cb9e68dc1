"""LoRA adapters: made locally with peft (non-zero weights), saved, loaded from disk.

Each adapter's outputs must differ from the base model's and equal those of a
peft-merged model (``merge_and_unload``) within 1e-4; requests for several adapters
in one batch are grouped per adapter and cached per adapter.
"""

from __future__ import annotations

import asyncio
import shutil

import pytest
import safetensors.torch
import torch
from session_requires import require

from genlm_core.errors import UnknownLoraError
from genlm_core.testing import LoraConformance

peft = require("peft", reason="peft is not installed (pip install 'genlm-hf[peft]')")

from transformers import AutoModelForCausalLM  # noqa: E402

from genlm_hf.errors import ModelLoadError  # noqa: E402
from genlm_hf.lm import AsyncTransformer  # noqa: E402

pytestmark = [
    # peft's get_peft_model (make_adapter, merged_logprobs) calls transformers' deprecated
    # API; genlm-hf itself silences peft's warning on a model's second adapter
    pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning"),
]

ATOL = 1e-4
TARGETS = {
    "tiny-llama3": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj"],
    "tiny-gpt2": ["c_attn", "c_proj"],
}
PROMPTS = [[5, 6, 7], [5, 6, 7, 8, 9], [100, 200], [5, 6], [42] * 30, [5, 6, 7]]


def fresh_model(path: str):
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    return model.eval()


def make_adapter(path: str, key: str, out_dir, seed: int) -> str:
    """A LoRA adapter with random non-zero A and B, saved with peft's save_pretrained."""
    torch.manual_seed(seed)
    config = peft.LoraConfig(
        r=4,
        lora_alpha=8,
        target_modules=TARGETS[key],
        init_lora_weights=False,  # random B too: the adapter changes the outputs
        fan_in_fan_out=key == "tiny-gpt2",
    )
    peft_model = peft.get_peft_model(fresh_model(path), config)
    with torch.no_grad():  # make the change large enough to see clearly
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.mul_(20.0)
    peft_model.save_pretrained(str(out_dir))
    return str(out_dir)


def merged_logprobs(path: str, adapter_dir: str, prompts: list[list[int]]) -> list[torch.Tensor]:
    merged = peft.PeftModel.from_pretrained(fresh_model(path), adapter_dir).merge_and_unload()
    outs = []
    with torch.inference_mode():
        for ids in prompts:
            logits = merged(torch.tensor([ids])).logits[0, -1]
            outs.append(torch.log_softmax(logits, -1, dtype=torch.float32))
    return outs


@pytest.fixture(params=["tiny-llama3", "tiny-gpt2"])
def setup(request, hf_models, tmp_path_factory):
    """(lm with a private model copy, model path, key, {name: adapter dir}, base loaded)."""
    key = request.param
    loaded = hf_models(key)
    adapters = {
        name: make_adapter(loaded.path, key, tmp_path_factory.mktemp(f"lora-{name}"), seed)
        for name, seed in (("a", 1), ("b", 2))
    }
    lm = AsyncTransformer(fresh_model(loaded.path), loaded.tokenizer, byte_vocab=loaded.byte_vocab)
    yield lm, loaded, key, adapters
    lm.cleanup()


async def test_adapter_differs_from_base_and_equals_merged(setup):
    lm, loaded, _, adapters = setup
    lm.add_new_lora(adapters["a"], "a")
    assert lm.lora_names == ["a"]
    expected = merged_logprobs(loaded.path, adapters["a"], PROMPTS)
    outs = await asyncio.gather(*(lm.next_token_logprobs(p, lora_name="a") for p in PROMPTS))
    bases = await asyncio.gather(*(lm.next_token_logprobs(p) for p in PROMPTS))
    for p, out, base, exp in zip(PROMPTS, outs, bases, expected, strict=True):
        torch.testing.assert_close(out, exp, atol=ATOL, rtol=0)
        assert (out - base).abs().max().item() > 1e-2
        with torch.inference_mode():  # the base path really is the untouched base model
            ref = torch.log_softmax(loaded.model(torch.tensor([p])).logits[0, -1], -1)
        torch.testing.assert_close(base, ref, atol=ATOL, rtol=0)
    # the sync path and the uncached path agree too
    lm.clear_cache()
    torch.testing.assert_close(
        lm.next_token_logprobs_sync(PROMPTS[1], "a"), expected[1], atol=ATOL, rtol=0
    )
    torch.testing.assert_close(
        lm.next_token_logprobs_uncached(PROMPTS[1], "a"), expected[1], atol=ATOL, rtol=0
    )


async def test_mixed_adapters_in_one_batch(setup):
    lm, loaded, _, adapters = setup
    lm.add_new_lora(adapters["a"], "a")
    lm.add_new_lora(adapters["b"], "b")
    expected = {
        "a": merged_logprobs(loaded.path, adapters["a"], PROMPTS),
        "b": merged_logprobs(loaded.path, adapters["b"], PROMPTS),
    }
    calls = [(p_i, name) for p_i in range(len(PROMPTS)) for name in ("a", None, "b")]
    for _ in range(2):  # second round: served from per-adapter caches / extended prefixes
        outs = await asyncio.gather(
            *(lm.next_token_logprobs(PROMPTS[i], lora_name=name) for i, name in calls)
        )
        for (i, name), out in zip(calls, outs, strict=True):
            exp = lm.next_token_logprobs_uncached(PROMPTS[i]) if name is None else expected[name][i]
            torch.testing.assert_close(out, exp, atol=ATOL, rtol=0)
        lm.cache.clear()  # force the K/V path on the second round
    extended = [p + [3] for p in PROMPTS]
    outs = await asyncio.gather(*(lm.next_token_logprobs(p, lora_name="b") for p in extended))
    for p, out in zip(extended, outs, strict=True):
        torch.testing.assert_close(
            out, merged_logprobs(loaded.path, adapters["b"], [p])[0], atol=ATOL, rtol=0
        )
    assert lm.kv_cache_stats.hits > 0


async def test_remove_and_replace(setup):
    lm, loaded, _, adapters = setup
    lm.add_new_lora(adapters["a"], "a")
    first = await lm.next_token_logprobs(PROMPTS[0], lora_name="a")
    lm.remove_lora("a")
    assert lm.lora_names == []
    with pytest.raises(UnknownLoraError, match="'a'"):
        await lm.next_token_logprobs(PROMPTS[0], lora_name="a")
    base = await lm.next_token_logprobs(PROMPTS[0])
    torch.testing.assert_close(base, lm.next_token_logprobs_uncached(PROMPTS[0]), atol=ATOL, rtol=0)
    # re-adding under the same name, then replacing it with another adapter
    lm.add_new_lora(adapters["a"], "a")
    torch.testing.assert_close(await lm.next_token_logprobs(PROMPTS[0], lora_name="a"), first)
    lm.add_new_lora(adapters["b"], "a")
    replaced = await lm.next_token_logprobs(PROMPTS[0], lora_name="a")
    expected_b = merged_logprobs(loaded.path, adapters["b"], [PROMPTS[0]])[0]
    torch.testing.assert_close(replaced, expected_b, atol=ATOL, rtol=0)


def test_bad_adapter_path(setup, tmp_path):
    lm = setup[0]
    with pytest.raises(ModelLoadError, match="no-such-adapter") as info:
        lm.add_new_lora(str(tmp_path / "no-such-adapter"), "x")
    assert isinstance(info.value, OSError)
    assert lm.lora_names == []


async def test_an_adapter_for_another_model_is_refused_and_leaves_no_trace(
    setup, hf_models, tmp_path
):
    """Target modules the model lacks: a ModelLoadError, and the model as it was."""
    lm, _, key, adapters = setup
    other = "tiny-gpt2" if key == "tiny-llama3" else "tiny-llama3"
    foreign = make_adapter(hf_models(other).path, other, tmp_path / "foreign", seed=3)
    before = lm.next_token_logprobs_uncached(PROMPTS[1])
    with pytest.raises(ModelLoadError, match="could not load LoRA adapter 'x'"):
        lm.add_new_lora(foreign, "x")
    assert lm.lora_names == []
    assert not hasattr(lm.model, "peft_config")
    assert not any("lora_" in name for name, _ in lm.model.named_parameters())
    torch.testing.assert_close(lm.next_token_logprobs_uncached(PROMPTS[1]), before)
    # weights that name a module the config does not target: injected, then taken out
    spoiled = tmp_path / "spoiled"
    shutil.copytree(adapters["a"], spoiled)
    weights = safetensors.torch.load_file(spoiled / "adapter_model.safetensors")
    weights["base_model.model.no_such_module.lora_A.weight"] = torch.zeros(4, 4)
    safetensors.torch.save_file(weights, spoiled / "adapter_model.safetensors")
    with pytest.raises(ModelLoadError, match="do not fit this model: 1 unexpected"):
        lm.add_new_lora(str(spoiled), "x")
    assert not any("lora_" in name for name, _ in lm.model.named_parameters())
    torch.testing.assert_close(lm.next_token_logprobs_uncached(PROMPTS[1]), before)
    lm.add_new_lora(adapters["a"], "a")  # a fitting adapter still loads and serves
    expected = merged_logprobs(hf_models(key).path, adapters["a"], [PROMPTS[1]])[0]
    got = await lm.next_token_logprobs(PROMPTS[1], lora_name="a")
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)


async def test_prefix_logprobs_under_an_adapter(setup):
    lm, loaded, _, adapters = setup
    lm.add_new_lora(adapters["a"], "a")
    ids = PROMPTS[4][:12] + PROMPTS[1]
    rows = await lm.prefix_next_token_logprobs(ids, lora_name="a")
    base = await lm.prefix_next_token_logprobs(ids)
    expected = merged_logprobs(loaded.path, adapters["a"], [ids[: i + 1] for i in range(len(ids))])
    for row, exp, b in zip(rows, expected, base, strict=True):
        torch.testing.assert_close(row, exp, atol=ATOL, rtol=0)
        assert (row - b).abs().max().item() > 1e-2  # the adapter's rows, not the base model's


class TestAdapterConformance(LoraConformance):
    """The shipped LoRA suite: replaced and removed adapters are never served stale."""

    @pytest.fixture(scope="class")
    @classmethod
    def adapter_dirs(cls, hf_models, tmp_path_factory):
        loaded = hf_models("tiny-gpt2")
        return loaded, tuple(
            make_adapter(loaded.path, "tiny-gpt2", tmp_path_factory.mktemp(f"v{seed}"), seed)
            for seed in (1, 2)
        )

    @pytest.fixture
    def lm(self, adapter_dirs):
        loaded, _ = adapter_dirs
        model = AsyncTransformer(
            fresh_model(loaded.path), loaded.tokenizer, byte_vocab=loaded.byte_vocab
        )
        yield model
        model.cleanup()

    @pytest.fixture
    def lora_adapters(self, adapter_dirs):
        return adapter_dirs[1]


async def test_async_adapter_swap_keeps_the_event_loop_running(setup):
    """add_new_lora_async / remove_lora_async load and unload off the loop (stall < 100 ms)."""
    import time

    lm, loaded, _, adapters = setup
    longest, last = 0.0, time.perf_counter()

    async def heartbeat():
        nonlocal longest, last
        while True:
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            longest, last = max(longest, now - last), now

    beat = asyncio.ensure_future(heartbeat())
    await asyncio.sleep(0)
    await lm.add_new_lora_async(adapters["a"], "a")
    await lm.add_new_lora_async(adapters["b"], "a")  # replaces it
    tuned = await lm.next_token_logprobs(PROMPTS[0], lora_name="a")
    await lm.remove_lora_async("a")
    longest = max(longest, time.perf_counter() - last)
    beat.cancel()
    assert longest < 0.1, f"the event loop stalled {longest:.3f} s"
    expected = merged_logprobs(loaded.path, adapters["b"], [PROMPTS[0]])[0]
    torch.testing.assert_close(tuned, expected, atol=ATOL, rtol=0)
    assert lm.lora_names == []
