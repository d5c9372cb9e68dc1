"""Float32 linear layers through oneDNN (genlm_hf._linear): same results, clear choices."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from session_requires import require

require("genlm_hf.lm", reason="genlm-hf is not installed")

import genlm_hf._linear as linear_module  # noqa: E402
from genlm_hf._linear import (  # noqa: E402
    INTEL_MIN_OUT_FEATURES,
    MIN_MULTIPLY_ADDS,
    ROW_BUCKETS,
    onednn_linear,
    onednn_linears,
    onednn_pays,
    onednn_unavailable_reason,
    resolve_linear_kernel,
)

CPU = torch.device("cpu")
needs_onednn = pytest.mark.skipif(
    bool(onednn_unavailable_reason()),
    reason=f"this torch build cannot run oneDNN linears: {onednn_unavailable_reason()}",
)


@pytest.fixture(autouse=True)
def rule_measured_on_amd(monkeypatch):
    """The tests below check the rule for CPUs whose MKL is not tuned (AMD's), wherever
    they run; the Intel rule's test sets the vendor itself."""
    monkeypatch.setattr(linear_module, "mkl_is_tuned_here", lambda: False)


def calls_onednn(monkeypatch) -> list[tuple[int, ...]]:
    """Record the input shape of every oneDNN call."""
    import genlm_hf._linear as mod

    seen: list[tuple[int, ...]] = []
    real = mod._op()

    def op(*args):
        seen.append(tuple(args[0].shape))
        return real(*args)

    monkeypatch.setattr(mod, "_op", lambda: op)
    return seen


@needs_onednn
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize(
    "shape, calls",
    [
        ((64, 96), [(64, 96)]),  # a bucket: as is
        ((4, 7, 96), [(32, 96)]),  # 28 rows: padded to the next bucket
        ((150, 96), [(64, 96), (64, 96), (32, 96)]),  # tiles of 64, the last one padded
    ],
)
def test_onednn_linear_equals_f_linear(bias, shape, calls, monkeypatch):
    seen = calls_onednn(monkeypatch)
    gen = torch.Generator().manual_seed(0)
    layer = torch.nn.Linear(96, 20_000, bias=bias)
    x = torch.randn(*shape, generator=gen)
    with torch.no_grad():
        got = onednn_linear(x, layer.weight, layer.bias)
        want = F.linear(x, layer.weight, layer.bias)
    assert seen == calls
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@needs_onednn
def test_onednn_sees_only_bucketed_row_counts(monkeypatch):
    """Each input shape costs torch's oneDNN cache ~0.7 MiB: row counts are bucketed."""
    seen = calls_onednn(monkeypatch)
    weight = torch.randn(4096, 64)
    with torch.no_grad():
        for rows in range(1, 200):
            x = torch.randn(rows, 64)
            torch.testing.assert_close(
                onednn_linear(x, weight, None), x @ weight.t(), rtol=1e-4, atol=1e-4
            )
    assert {shape[0] for shape in seen} == set(ROW_BUCKETS)


@needs_onednn
def test_two_to_seven_rows_go_to_onednn_only_through_large_layers(monkeypatch):
    """MKL computes 2-7 rows slowly through big layers (SmolLM2's head: 16-34 ms vs 6.8)."""
    seen = calls_onednn(monkeypatch)
    gen = torch.Generator().manual_seed(0)
    head = torch.nn.Linear(576, 20_000)
    narrow = torch.nn.Linear(64, 50_000)  # the tiny GPT-2's head: MKL is faster there
    with torch.no_grad():
        for rows in (1, 2, 3, 7):
            x = torch.randn(rows, 576, generator=gen)
            got = onednn_linear(x, head.weight, head.bias)
            torch.testing.assert_close(got, F.linear(x, head.weight, head.bias))
        onednn_linear(torch.randn(3, 64), narrow.weight, narrow.bias)
    assert seen == [(8, 576)] * 3  # 2, 3 and 7 rows, padded; not 1 row, not the narrow layer
    assert onednn_pays(2, 576, 49_152) and onednn_pays(8, 576, 576)
    assert not onednn_pays(1, 576, 49_152) and not onednn_pays(2, 576, 576)
    assert not onednn_pays(7, 64, 50_257)


@needs_onednn
def test_strided_input_is_handled(monkeypatch):
    seen = calls_onednn(monkeypatch)
    layer = torch.nn.Linear(96, 20_000)
    x = torch.randn(32, 192)[:, ::2]  # every other column
    with torch.no_grad():
        got = onednn_linear(x, layer.weight, layer.bias)
        want = F.linear(x, layer.weight, layer.bias)
    assert seen
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_small_products_and_autograd_stay_on_torch(monkeypatch):
    seen = calls_onednn(monkeypatch) if not onednn_unavailable_reason() else []
    small = torch.nn.Linear(64, 192)
    x = torch.randn(10, 64)
    assert 10 * 64 * 192 < MIN_MULTIPLY_ADDS
    few = torch.randn(1, 4096)  # one row (a matrix-vector product), however big the layer
    wide = torch.nn.Linear(4096, 4096)
    with torch.no_grad():
        assert torch.equal(onednn_linear(x, small.weight, small.bias), small(x))
        assert torch.equal(onednn_linear(few, wide.weight, wide.bias), wide(few))
    big = torch.nn.Linear(96, 40_000)
    xb = torch.randn(8, 96)
    out = onednn_linear(xb, big.weight, big.bias)  # autograd on: oneDNN has no backward
    out.sum().backward()
    assert big.weight.grad is not None
    assert seen == []


@needs_onednn
def test_onednn_linears_patches_plain_layers_for_the_block_only(monkeypatch):
    seen = calls_onednn(monkeypatch)

    class Custom(torch.nn.Linear):
        pass

    torch.manual_seed(0)
    hooked = torch.nn.Linear(1024, 4096)
    hooked.register_forward_hook(lambda *a: None)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 1024), hooked, Custom(4096, 256), torch.nn.Linear(256, 4096)
    )
    x = torch.randn(16, 64)
    with torch.no_grad():
        want = model(x)
        with onednn_linears(model) as patched:
            assert patched == 2  # the plain ones; hooked and subclassed layers are left alone
            assert "forward" in vars(model[0]) and "forward" in vars(model[3])
            got = model(x)
    assert all("forward" not in vars(m) for m in model)
    assert seen == [(16, 64), (16, 256)]  # each product >= MIN_MULTIPLY_ADDS
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@needs_onednn
def test_on_intel_cpus_only_vocabulary_projections_of_4_to_12_rows_go_to_onednn(monkeypatch):
    """MKL is tuned for Intel's CPUs: oneDNN pays there only where MKL's few-row path is slow."""
    monkeypatch.setattr(linear_module, "mkl_is_tuned_here", lambda: True)
    seen = calls_onednn(monkeypatch)
    head = torch.nn.Linear(576, INTEL_MIN_OUT_FEATURES)
    layer = torch.nn.Linear(576, 1536)
    tiny_head = torch.nn.Linear(64, 50_000)
    model = torch.nn.Sequential(layer, torch.nn.Linear(1536, 576), head)
    with torch.no_grad():
        for rows in (2, 3, 4, 12, 13, 32):
            x = torch.randn(rows, 576)
            torch.testing.assert_close(onednn_linear(x, head.weight, head.bias), head(x))
            torch.testing.assert_close(onednn_linear(x, layer.weight, layer.bias), layer(x))
        onednn_linear(torch.randn(32, 64), tiny_head.weight, tiny_head.bias)
        with onednn_linears(model) as patched:
            assert patched == 1  # the head; the other layers never pay: left as they are
            assert "forward" in vars(head) and "forward" not in vars(layer)
    assert seen == [(8, 576), (16, 576)]  # 4 rows padded to 8, 12 to 16; no other call
    assert onednn_pays(8, 576, 49_152) and not onednn_pays(8, 576, 1536)
    assert onednn_pays(8, 576, 49_152, mkl_tuned=True)
    assert not onednn_pays(32, 64, 49_152, mkl_tuned=True)
    assert onednn_pays(32, 64, 49_152, mkl_tuned=False)


@pytest.mark.parametrize(
    "cpuinfo, intel",
    [
        ("processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t: avx\n", True),
        ("processor\t: 0\nvendor_id\t: AuthenticAMD\n", False),
        ("processor\t: 0\nCPU implementer\t: 0x41\n", False),  # an Arm CPU: no vendor_id
    ],
)
def test_the_cpu_vendor_is_read_from_proc_cpuinfo(cpuinfo, intel, tmp_path, monkeypatch):
    info = tmp_path / "cpuinfo"
    info.write_text(cpuinfo)
    monkeypatch.setattr(linear_module.platform, "processor", lambda: "")
    assert linear_module.reads_intel(str(info)) is intel


def test_onednn_linears_restores_layers_after_an_error():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8))
    with pytest.raises(RuntimeError, match="boom"), onednn_linears(model):
        raise RuntimeError("boom")
    assert "forward" not in vars(model[0])


def test_resolve_linear_kernel():
    expected = "torch" if onednn_unavailable_reason() else "onednn"
    assert resolve_linear_kernel("auto", CPU, torch.float32) == expected
    assert resolve_linear_kernel("torch", CPU, torch.float32) == "torch"
    assert resolve_linear_kernel("auto", CPU, torch.bfloat16) == "torch"
    assert resolve_linear_kernel("auto", torch.device("meta"), torch.float32) == "torch"
    with pytest.raises(ValueError, match=r"linear_kernel must be one of .* got 'mkl'"):
        resolve_linear_kernel("mkl", CPU, torch.float32)
    with pytest.raises(ValueError, match="float32 only; pass 'auto' or 'torch'"):
        resolve_linear_kernel("onednn", CPU, torch.float16)


@pytest.mark.parametrize("kernel", ["torch", "auto"])
async def test_models_match_uncached_with_either_kernel(hf_models, kernel):
    lm = hf_models("tiny-llama3").lm(linear_kernel=kernel)
    expected = "torch" if kernel == "torch" or onednn_unavailable_reason() else "onednn"
    assert lm.linear_kernel == expected
    prompts = [[1, 2, 3, 4, 5][:n] + [7] * k for n in range(1, 6) for k in range(0, 40, 7)]
    import asyncio

    outs = await asyncio.gather(*(lm.next_token_logprobs(p) for p in prompts))
    for p, out in zip(prompts, outs, strict=True):
        torch.testing.assert_close(out, lm.next_token_logprobs_uncached(p), rtol=0, atol=1e-4)
    lm.cleanup()


def test_bad_linear_kernel_is_refused(hf_models):
    with pytest.raises(ValueError, match="linear_kernel must be one of"):
        hf_models("tiny-gpt2").lm(linear_kernel="fast")
