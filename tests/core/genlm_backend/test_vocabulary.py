"""genlm-backend 0.3.1 ``tests/test_vocabulary.py``, ported: ``genlm.backend`` -> ``genlm_core``.

Hub tokenizers map to assets (see conftest.py). Differences (docs/migrating.md):

* genlm-backend's ``tokenization.bytes`` module (``ByteDecoderError``,
  ``ByteVocabError``, ``check_byte_decoder``) has no counterpart: the strategy is read
  from the tokenizer's declared decoder, and what cannot be decoded raises
  ``UnsupportedTokenizerError`` (a ``ValueError``). The three tests that used that
  module check the same behaviour through ``decode_vocab`` / ``get_byte_vocab``.
* Round-trip properties decode each vocabulary once per session (the original called
  ``decode_vocab`` again for every example; the result is the same).
"""

from unittest.mock import patch

import pytest
from hypothesis import given
from hypothesis import strategies as st

from genlm_core.errors import UnsupportedTokenizerError
from genlm_core.tokenization import decode_vocab, get_byte_vocab

MAX_SIZE = 50
texts = st.text(min_size=1, max_size=MAX_SIZE)


@pytest.mark.parametrize(
    "name",
    [
        "openai-community/gpt2",
        "meta-llama/Meta-Llama-3-8B",
        "codellama/CodeLlama-7b-Instruct-hf",
        "google/gemma-7b",
        "microsoft/phi-2",
        "mistralai/Mistral-7B-Instruct-v0.3",
        "unsloth/DeepSeek-R1-Distill-Llama-8B",
    ],
)
@given(text=texts, is_fast=st.booleans())
def test_roundtrip(name, text, is_fast, load_tokenizer, load_byte_vocab, assert_roundtrip_bytes):
    """genlm-backend's test_gpt2, test_llama3, ..., one per tokenizer, as parameters."""
    tokenizer = load_tokenizer(name, is_fast)
    byte_vocab = load_byte_vocab(name)  # decode_vocab(tokenizer), once per session
    assert_roundtrip_bytes(text, tokenizer, byte_vocab)


def test_byte2str_fallbacks(load_tokenizer):
    tokenizer = load_tokenizer("openai-community/gpt2", False)

    for fallback in ("latin1", "tokenizer", "replace"):
        byte_vocab, str_vocab = decode_vocab(tokenizer, byte2str_fallback=fallback)
        assert len(byte_vocab) > 0
        assert len(str_vocab) == len(byte_vocab)

    with pytest.raises(ValueError):
        decode_vocab(tokenizer, byte2str_fallback="invalid")


def test_byte_decoder_error_handling(load_tokenizer, slow_byte_level_tokenizer):
    """genlm-backend checked ``check_byte_decoder`` (internal); here a slow tokenizer
    whose ``byte_decoder`` is invalid or incomplete is refused by ``decode_vocab``."""
    tokenizer = load_tokenizer("openai-community/gpt2")

    invalid = slow_byte_level_tokenizer(tokenizer)
    invalid.byte_decoder = {"a": 999}  # not a byte value
    with pytest.raises(UnsupportedTokenizerError):
        decode_vocab(invalid)

    incomplete = slow_byte_level_tokenizer(tokenizer)
    del incomplete.byte_decoder["a"]  # a byte is missing
    with pytest.raises(UnsupportedTokenizerError):
        decode_vocab(incomplete)


def test_decode_vocab_failure(load_tokenizer):
    """An undecodable vocabulary surfaces as ValueError."""
    tokenizer = load_tokenizer("openai-community/gpt2")
    failure = UnsupportedTokenizerError("Cannot decode vocabulary")
    with patch("genlm_core.tokenization.vocab.read_byte_vocab", side_effect=failure):
        with pytest.raises(ValueError, match="Cannot decode vocabulary"):
            decode_vocab(tokenizer)


def test_unknown_byte_encoding_is_rejected():
    """A decoder that is neither ByteLevel nor SentencePiece is refused.

    genlm-backend faked the tokenizer's serialization with a MagicMock; genlm-core reads
    the decoder object itself, so this builds a real in-memory WordPiece tokenizer.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "hello": 1, "world": 2, "##s": 3}
    backend = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece(prefix="##")
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]")

    with pytest.raises(UnsupportedTokenizerError, match="decoder is WordPiece"):
        get_byte_vocab(tokenizer)
