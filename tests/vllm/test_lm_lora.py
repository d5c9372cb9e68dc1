"""LoRA adapters on vLLM: made locally with peft, compared with genlm-hf's adapters.

Each adapter must change the log-probs and match AsyncTransformer with the same
adapter within 1e-3; engine ids are never reused, so replacing an adapter under the
same name serves the new weights.
"""

from __future__ import annotations

import asyncio

import pytest
from session_requires import require

require("vllm", reason="vLLM is not installed (nox -s vllm installs it)")

import torch  # noqa: E402

from genlm_core.errors import InvalidArgumentError, UnknownLoraError  # noqa: E402
from genlm_core.testing import LoraConformance  # noqa: E402

peft = require("peft", reason="peft is not installed (pip install 'genlm-hf[peft]')")

pytestmark = [
    # peft warns on every second adapter loaded into genlm-hf's model, which is what the
    # reference does; torch warns about its own jit decorators, which peft imports
    pytest.mark.filterwarnings("ignore:Already found a `peft_config` attribute:UserWarning"),
    pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"),
]

ATOL = 1e-3
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
PROMPTS = [[1, 5, 6, 7], [1, 5, 6, 7, 8, 9], [1, 100, 200], [1] + list(range(10, 70)), [1, 5]]


def make_adapter(path: str, out_dir, seed: int) -> str:
    """A LoRA adapter (rank 4) with random non-zero A and B, saved by peft."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS, init_lora_weights=False)
    peft_model = peft.get_peft_model(model, config)
    with torch.no_grad():  # make the change large enough to see clearly
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.mul_(20.0)
    peft_model.save_pretrained(str(out_dir))
    return str(out_dir)


@pytest.fixture(scope="module")
def adapters(model_paths, tmp_path_factory) -> dict[str, str]:
    path = model_paths("tiny")
    return {
        name: make_adapter(path, tmp_path_factory.mktemp(f"vllm-lora-{name}"), seed)
        for name, seed in (("a", 1), ("b", 2))
    }


@pytest.fixture
def pair(engines, hf_reference, adapters):
    """(vLLM wrapper, hf model) with adapters "a" and "b" loaded in both."""
    lm = engines("tiny").lm()
    hf = hf_reference("tiny")
    for name, path in adapters.items():
        lm.add_new_lora(path, name)
        hf.add_new_lora(path, name)
    yield lm, hf
    lm.cleanup()
    for name in list(hf.lora_names):
        hf.remove_lora(name)


def max_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


async def test_adapters_change_logprobs_and_match_hf(pair):
    lm, hf = pair
    base = await lm.batch_next_token_logprobs(PROMPTS)
    for name in ("a", "b"):
        ours = await lm.batch_next_token_logprobs(PROMPTS, lora_name=name)
        ref = await hf.batch_next_token_logprobs(PROMPTS, lora_name=name)
        assert max_err(ours, ref) < ATOL
        assert max_err(ours, base) > 0.1  # the adapter does something
    assert max_err(base, await hf.batch_next_token_logprobs(PROMPTS)) < ATOL


async def test_mixed_adapters_in_one_batch(pair):
    lm, hf = pair
    calls = [(p, name) for p in PROMPTS for name in (None, "a", "b")]
    outs = await asyncio.gather(*(lm.next_token_logprobs(p, lora_name=n) for p, n in calls))
    for (p, name), out in zip(calls, outs, strict=True):
        assert max_err(out, await hf.next_token_logprobs(p, lora_name=name)) < ATOL


async def test_replacing_and_removing_adapters(pair, adapters):
    lm, hf = pair

    def engine_id(name):
        return lm.adapter_handle(lm.make_request(PROMPTS[0], name)).lora_int_id

    ids_before = {name: engine_id(name) for name in ("a", "b")}
    old = await lm.next_token_logprobs(PROMPTS[0], lora_name="a")
    lm.add_new_lora(adapters["b"], "a")  # "a" now holds b's weights, under a new id
    assert engine_id("a") not in ids_before.values()
    new = await lm.next_token_logprobs(PROMPTS[0], lora_name="a")
    ref_b = await hf.next_token_logprobs(PROMPTS[0], lora_name="b")
    assert max_err(new, ref_b) < ATOL and max_err(new, old) > 0.1
    lm.remove_lora("a")
    assert lm.lora_names == ["b"]
    with pytest.raises(UnknownLoraError, match="'a'"):
        await lm.next_token_logprobs(PROMPTS[0], lora_name="a")
    lm.add_new_lora(adapters["a"], "a")  # back, with yet another id
    again = await lm.next_token_logprobs(PROMPTS[0], lora_name="a")
    assert max_err(again, old) < 1e-4


async def test_lora_sampling_uses_the_adapter(pair):
    lm, _ = pair
    prompt = PROMPTS[1]
    runs = {}
    for name in (None, "a", "b"):
        # vLLM's sampler: reproducible per seed, and the adapter changes the samples
        first = await lm.sample(prompt, max_tokens=8, eos_token_ids=[], seed=5, lora_name=name)
        again = await lm.sample(prompt, max_tokens=8, eos_token_ids=[], seed=5, lora_name=name)
        assert first == again and len(first) == 8
        runs[name] = first
        # below vLLM's lowest temperature: the exact path, greedy under the adapter
        sampled = await lm.sample(
            prompt, max_tokens=3, eos_token_ids=[], temperature=1e-6, lora_name=name
        )
        greedy: list[int] = []
        for _ in range(3):
            out = await lm.next_token_logprobs(prompt + greedy, lora_name=name)
            greedy.append(int(out.argmax()))
        assert sampled == greedy
    assert len({tuple(v) for v in runs.values()}) == 3


def test_bad_adapter_path_and_lora_disabled_engine(engines, tmp_path):
    from genlm_vllm.errors import ModelLoadError

    lm = engines("tiny").lm()
    with pytest.raises(ModelLoadError, match="could not load LoRA adapter 'x'"):
        lm.add_new_lora(str(tmp_path / "missing"), "x")
    assert lm.lora_names == []
    lm._lora_enabled_at_start = False  # as on an engine started without enable_lora
    with pytest.raises(InvalidArgumentError, match="enable_lora"):
        lm.add_new_lora(str(tmp_path), "x")
    lm.cleanup()


class TestAdapterConformance(LoraConformance):
    """The shipped LoRA suite on vLLM: replaced and removed adapters never served stale."""

    lora_atol = ATOL  # vLLM's LoRA kernels against its own rows: well inside 1e-3

    @pytest.fixture
    def lm(self, engines):
        model = engines("tiny").lm()
        yield model
        model.cleanup()

    @pytest.fixture
    def lora_adapters(self, adapters):
        return adapters["a"], adapters["b"]


async def test_live_base_and_lora_contexts_in_one_batch(pair):
    """Base and adapted contexts extended together, live (each under its own adapter)."""
    lm, hf = pair
    await lm.release_all()
    calls = [([1, 5, 6, 7], n) for n in (None, "a", "b")] + [([1, 8, 9], n) for n in (None, "a")]
    extended = lm._live.extended
    for step in range(3):
        outs = await asyncio.gather(*(lm.next_token_logprobs(p, lora_name=n) for p, n in calls))
        for (p, name), out in zip(calls, outs, strict=True):
            assert max_err(out, await hf.next_token_logprobs(p, lora_name=name)) < ATOL
        calls = [([*p, 40 + step], n) for p, n in calls]
    # 5 contexts on an engine of 4 slots: some are released each round, the rest extended
    assert lm._live.extended - extended >= len(calls)
