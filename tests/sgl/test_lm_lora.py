"""LoRA adapters on SGLang (in-process and via the server), compared with genlm-hf's.

Each adapter is made locally with peft (rank 4, random non-zero A and B), must change
the log-probs, and must match genlm-hf with the same adapter within 1e-3; a replaced
adapter gets a new SGLang id, so its old cached prefixes are never served.

These tests need an NVIDIA GPU. On a CPU every SGLang 0.5.23 LoRA backend fails when
the engine starts: its LoRA layers allocate pinned host memory, which a CPU-only
torch refuses ("RuntimeError: pin_memory=True requires a CUDA or other accelerator
backend; no pinned memory allocator is available on this system", measured with
lora_backend torch_native and csgmv; test_lm_lifecycle.py checks this error on CPUs).
"""

from __future__ import annotations

import asyncio

import pytest
from session_requires import require

require("sglang", reason="SGLang is not installed (nox -s sgl installs it)")

import torch  # noqa: E402

from genlm_core.errors import UnknownLoraError  # noqa: E402
from genlm_core.plugins.probes import nvidia_gpu_count  # noqa: E402
from genlm_core.testing import LoraConformance  # noqa: E402

peft = require("peft", reason="peft is not installed (pip install 'genlm-hf[peft]')")

pytestmark = [
    pytest.mark.skipif(
        not nvidia_gpu_count()[0],
        reason=(
            "SGLang's LoRA needs an NVIDIA GPU: on this CPU the engine fails to start with "
            "'RuntimeError: pin_memory=True requires a CUDA or other accelerator backend' "
            "(sglang 0.5.23, lora_backend torch_native and csgmv)"
        ),
    ),
    pytest.mark.filterwarnings("ignore:Already found a `peft_config` attribute:UserWarning"),
]

ATOL = 1e-3
PROMPTS = [[1, 5, 6, 7], [1, 5, 6, 7, 8, 9], [1, 100, 200], [1] + list(range(10, 90)), [1, 5]]


def make_adapter(path: str, out_dir, seed: int, targets: list[str]) -> str:
    """A LoRA adapter (rank 4) with random non-zero A and B, saved by peft."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=targets, init_lora_weights=False)
    peft_model = peft.get_peft_model(model, config)
    with torch.no_grad():  # make the change large enough to see clearly
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.mul_(20.0)
    peft_model.save_pretrained(str(out_dir))
    return str(out_dir)


@pytest.fixture(scope="module")
def adapters(smollm2, engine, tmp_path_factory) -> dict[str, str]:
    targets = sorted(engine.server_args.lora_target_modules)  # those of conftest.LORA_OPTS
    return {
        name: make_adapter(smollm2, tmp_path_factory.mktemp(f"sgl-lora-{name}"), seed, targets)
        for name, seed in (("a", 1), ("b", 2))
    }


@pytest.fixture(params=["in-process", "server"])
def pair(request, hf_reference, adapters):
    """(SGLang model, hf model) with adapters "a" and "b" loaded in both."""
    kind = "make_lm" if request.param == "in-process" else "make_server_lm"
    lm = request.getfixturevalue(kind)()
    hf = hf_reference
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
        assert max_err(ours, await hf.batch_next_token_logprobs(PROMPTS, lora_name=name)) < ATOL
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
    old = await lm.next_token_logprobs(PROMPTS[0], lora_name="a")
    lm.add_new_lora(adapters["b"], "a")  # "a" now holds b's weights
    new = await lm.next_token_logprobs(PROMPTS[0], lora_name="a")
    assert max_err(new, await hf.next_token_logprobs(PROMPTS[0], lora_name="b")) < ATOL
    assert max_err(new, old) > 0.1
    lm.remove_lora("a")
    assert lm.lora_names == ["b"]
    with pytest.raises(UnknownLoraError, match="'a'"):
        await lm.next_token_logprobs(PROMPTS[0], lora_name="a")
    lm.add_new_lora(adapters["a"], "a")
    assert max_err(await lm.next_token_logprobs(PROMPTS[0], lora_name="a"), old) < 1e-4


async def test_lora_sampling_uses_the_adapter(pair):
    lm, _ = pair
    prompt = PROMPTS[1]
    for name in (None, "a", "b"):
        sampled = await lm.sample(
            prompt, max_tokens=3, eos_token_ids=[], temperature=1e-6, lora_name=name
        )
        greedy: list[int] = []
        for _ in range(3):
            greedy.append(
                int((await lm.next_token_logprobs(prompt + greedy, lora_name=name)).argmax())
            )
        assert sampled == greedy


@pytest.fixture(params=["in-process", "server"])
def sgl_lm(request):
    kind = "make_lm" if request.param == "in-process" else "make_server_lm"
    model = request.getfixturevalue(kind)()
    yield model
    model.cleanup()


class TestAdapterConformance(LoraConformance):
    """The shipped LoRA suite on SGLang, in-process and through the server."""

    lora_atol = ATOL

    @pytest.fixture
    def lm(self, sgl_lm):
        return sgl_lm

    @pytest.fixture
    def lora_adapters(self, adapters):
        return adapters["a"], adapters["b"]
