"""Session-wide caches of the expensive inputs several test modules share.

Loading a real tokenizer takes 0.5-2 s, decoding its vocabulary 1-4 s, and
genlm-backend's reference decoding as long again; the tokenization, trie and asset
tests need the same ones. Each is built once per session here. What these fixtures
return is shared between tests: never mutate it.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asset_tokenizers import asset_tokenizer
from byte_oracle import gpt2_bytes


@functools.cache
def _decoded(name: str) -> tuple[list, list]:
    from genlm_core.tokenization import decode_vocab

    return decode_vocab(asset_tokenizer(name))


@functools.cache
def _reference_decoded(name: str) -> tuple[list, list]:
    from genlm.backend.tokenization import decode_vocab

    return decode_vocab(asset_tokenizer(name))


@pytest.fixture(scope="session")
def tokenizer_of() -> Callable[[str], Any]:
    """``tokenizer_of(name)``: the asset tokenizer ``name``, loaded once per session."""
    return asset_tokenizer


@pytest.fixture(scope="session")
def decoded_vocab() -> Callable[[str], tuple[list, list]]:
    """``decoded_vocab(name)``: genlm-core's ``(byte_vocab, str_vocab)`` of a tokenizer asset."""
    return _decoded


@pytest.fixture(scope="session")
def reference_decoded_vocab() -> Callable[[str], tuple[list, list]]:
    """``reference_decoded_vocab(name)``: genlm-backend 0.3.1's ``decode_vocab`` of it."""
    return _reference_decoded


def _gpt2_alphabet():
    """GPT-2's bytes_to_unicode (byte -> character), the oracle's table inverted."""
    return {b: ch for ch, b in gpt2_bytes().items()}


class SlowByteLevelTokenizer:
    """What transformers 4's slow ``GPT2Tokenizer`` exposes, over a fast tokenizer's vocab.

    transformers 5 no longer ships slow GPT-2 tokenizers; this stand-in has the same
    surface (``byte_decoder``, ``get_vocab``, ``added_tokens_decoder``, and a ``decode``
    that maps characters through ``byte_decoder`` as ``convert_tokens_to_string`` does).
    """

    def __init__(self, fast):
        self._fast = fast
        self.name_or_path = "slow-" + str(fast.name_or_path)
        self.byte_decoder = gpt2_bytes()
        self.added_tokens_decoder = fast.added_tokens_decoder

    def get_vocab(self):
        return self._fast.get_vocab()

    def convert_ids_to_tokens(self, token_id):
        return self._fast.convert_ids_to_tokens(token_id)

    def encode(self, text, add_special_tokens=False):
        return self._fast.encode(text, add_special_tokens=add_special_tokens)

    def decode(self, ids, skip_special_tokens=False, clean_up_tokenization_spaces=False):
        out, run = [], []
        for token_id in ids:
            if token_id in self.added_tokens_decoder:
                out.append(bytearray(run).decode("utf-8", errors="replace"))
                out.append(self.added_tokens_decoder[token_id].content)
                run = []
            else:
                run += [self.byte_decoder[c] for c in self._fast.convert_ids_to_tokens(token_id)]
        out.append(bytearray(run).decode("utf-8", errors="replace"))
        return "".join(out)


@pytest.fixture(scope="session")
def gpt2_alphabet() -> Callable[[], dict[int, str]]:
    """GPT-2's byte -> character table, written out apart from the code under test."""
    return _gpt2_alphabet


@pytest.fixture(scope="session")
def slow_byte_level_tokenizer() -> type:
    """:class:`SlowByteLevelTokenizer`: build one with ``slow_byte_level_tokenizer(fast)``."""
    return SlowByteLevelTokenizer


@pytest.fixture
def young_gc() -> Iterator[None]:
    """Make ``gc.collect()`` inside the test look only at objects the test made.

    Tests that collect garbage in a loop (to see memory come back) would otherwise
    walk everything the session keeps (tokenizers, vocabularies) at every call: here
    ~0.5 s each. ``gc.freeze`` sets those older objects aside for the test's duration.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
