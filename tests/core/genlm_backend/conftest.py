"""genlm-backend 0.3.1's own tests (its sdist's ``tests/``), ported: imports renamed.

Hub names map to this project's registry-built assets (nothing comes from a hub):

=====================================  ================  =================================
genlm-backend's test tokenizer         asset             why this one
=====================================  ================  =================================
openai-community/gpt2                  gpt2-npm          the same vocabulary
meta-llama/Meta-Llama-3-8B             llama3            the same vocabulary
codellama/CodeLlama-7b-Instruct-hf     llama2            Llama-2-format SentencePiece BPE
google/gemma-7b, google/gemma-2b       gemma3            Gemma SentencePiece (with duplicates)
microsoft/phi-2                        gpt2-whisper      GPT-2 byte BPE (phi-2's is CodeGen's)
mistralai/Mistral-7B-Instruct-v0.3     mistral-v1-spm    Mistral SentencePiece
unsloth/DeepSeek-R1-Distill-Llama-8B   llama3-meta       Llama-3's vocabulary (from ranks)
=====================================  ================  =================================

Every deliberate difference is listed in ``docs/migrating.md``; the tests that meet one
say so where they differ from the original.
"""

from __future__ import annotations

from contextlib import contextmanager

import pytest

HUB = {
    "openai-community/gpt2": "gpt2-npm",
    "meta-llama/Meta-Llama-3-8B": "llama3",
    "codellama/CodeLlama-7b-Instruct-hf": "llama2",
    "google/gemma-7b": "gemma3",
    "google/gemma-2b": "gemma3",
    "microsoft/phi-2": "gpt2-whisper",
    "mistralai/Mistral-7B-Instruct-v0.3": "mistral-v1-spm",
    "unsloth/DeepSeek-R1-Distill-Llama-8B": "llama3-meta",
}


@pytest.fixture(scope="session")
def load_tokenizer(tokenizer_of):
    """genlm-backend's ``load_tokenizer(name, use_fast)``, on the asset the hub name maps to.

    transformers 5 has one tokenizer class per model (``use_fast=False`` gives the same
    fast tokenizer), so both values of ``use_fast`` get it.
    """

    def load(name: str, use_fast: bool = True):
        return tokenizer_of(HUB[name])

    return load


@pytest.fixture(scope="session")
def load_byte_vocab(decoded_vocab):
    """``load_byte_vocab(hub_name)``: ``decode_vocab(load_tokenizer(hub_name))[0]``, cached."""
    return lambda name: decoded_vocab(HUB[name])[0]


@pytest.fixture(scope="session")
def assert_roundtrip_bytes():
    """genlm-backend's ``assert_roundtrip_bytes`` (a fixture: conftest modules are not
    importable under ``--import-mode=importlib``)."""

    def check(test_case, tokenizer, byte_vocab):
        return assert_roundtrip(test_case, tokenizer, byte_vocab, vocab_type="byte")

    return check


def assert_roundtrip(test_case, tokenizer, vocab, vocab_type):
    """genlm-backend's ``assert_roundtrip``, unchanged."""
    with turn_off_space_cleaning(tokenizer):
        encd = tokenizer.encode(test_case)
        if vocab_type == "str":
            have = "".join([vocab[i] for i in encd])
        elif vocab_type == "byte":
            have = b"".join([vocab[i].byte_string for i in encd]).decode("utf-8")
        else:
            raise ValueError(f"Invalid vocab_type: {vocab_type}. Must be 'str' or 'byte'.")
        want = tokenizer.decode(encd)
        if have != want:
            pos = next(
                (i for i in range(min(len(have), len(want))) if have[i] != want[i]),
                min(len(have), len(want)),
            )
            raise AssertionError(
                f"\nRoundtrip assertion failed for {vocab_type} vocabulary:"
                f"\nMismatch at position {pos}"
                f"\nHave: ...{have[max(0, pos - 20) : pos + 20]!r}..."
                f"\nWant: ...{want[max(0, pos - 20) : pos + 20]!r}..."
            )


@contextmanager
def turn_off_space_cleaning(tokenizer):
    """The shared tokenizer is restored afterwards (the session shares it)."""
    original_value = tokenizer.clean_up_tokenization_spaces
    try:
        tokenizer.clean_up_tokenization_spaces = False
        yield
    finally:
        tokenizer.clean_up_tokenization_spaces = original_value
