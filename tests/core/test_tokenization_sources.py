"""decode_vocab on the other kinds of tokenizer objects, and the round-trip guard.

Slow SentencePiece tokenizers (``sp_model``), slow GPT-2 style tokenizers
(``byte_decoder``), tiktoken encodings and bare ``tokenizers.Tokenizer`` objects, each
checked against the fast Hugging Face tokenizer of the same vocabulary; and tokenizers
built in-test whose decoder our strategy cannot model, which must be refused.
"""

import pytest
from session_requires import require
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, SentencePieceBackend

from genlm_assets import tokenizer_dir
from genlm_core.errors import UnsupportedTokenizerError
from genlm_core.tokenization import decode_vocab, get_byte_vocab

# --- slow tokenizers --------------------------------------------------------------------


def test_slow_sentencepiece_tokenizer_matches_the_fast_one(decoded_vocab):
    directory = tokenizer_dir("mistral-v1-spm")
    slow = SentencePieceBackend(vocab_file=str(directory / "tokenizer.model"))
    assert not hasattr(slow, "backend_tokenizer") and hasattr(slow, "sp_model")
    slow_vocab, slow_strs = decode_vocab(slow)
    fast_vocab, _ = decoded_vocab("mistral-v1-spm")  # decode_vocab of the fast tokenizer
    assert [t.byte_string for t in slow_vocab] == [t.byte_string for t in fast_vocab]
    assert slow_vocab[slow.sp_model.piece_to_id("<0xE7>")] == b"\xe7"
    assert slow_strs[slow.sp_model.piece_to_id("\u2581the")] == " the"

    from genlm.backend.tokenization import decode_vocab as reference

    ref_vocab, ref_strs = reference(slow)
    assert [t.byte_string for t in slow_vocab] == [t.byte_string for t in ref_vocab]
    assert slow_strs == ref_strs


def test_slow_sentencepiece_without_byte_fallback_is_unsupported():
    slow = SentencePieceBackend(vocab_file=str(tokenizer_dir("unigram-botchan") / "spiece.model"))
    with pytest.raises(UnsupportedTokenizerError, match="sp_model.*0 of the 256 byte-fallback"):
        decode_vocab(slow)


def test_slow_byte_decoder_tokenizer_matches_the_fast_one(
    tokenizer_of, decoded_vocab, slow_byte_level_tokenizer
):
    slow = slow_byte_level_tokenizer(tokenizer_of("gpt2-npm"))
    slow_vocab, slow_strs = decode_vocab(slow)
    fast_vocab, fast_strs = decoded_vocab("gpt2-npm")  # decode_vocab of the fast tokenizer
    assert [t.byte_string for t in slow_vocab] == [t.byte_string for t in fast_vocab]
    assert slow_strs == fast_strs
    assert slow_vocab[50256] == b"<|endoftext|>"


def test_slow_byte_decoder_with_unknown_characters_is_unsupported(
    tokenizer_of, slow_byte_level_tokenizer
):
    slow = slow_byte_level_tokenizer(tokenizer_of("gpt2-npm"))
    del slow.byte_decoder["Ġ"]  # the space: used by thousands of tokens
    with pytest.raises(UnsupportedTokenizerError, match="outside that byte alphabet"):
        decode_vocab(slow)


# --- tiktoken ---------------------------------------------------------------------------

CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)


@pytest.fixture(scope="module")
def cl100k_pair(tokenizer_of, gpt2_alphabet):
    """The cl100k HF tokenizer and a tiktoken.Encoding built from the same files."""
    tiktoken = require("tiktoken")  # the `assets` extra installs it
    fast = tokenizer_of("cl100k")
    to_byte = {ch: b for b, ch in gpt2_alphabet().items()}
    specials = {t.content: i for i, t in fast.added_tokens_decoder.items()}
    model = fast.backend_tokenizer.get_vocab(with_added_tokens=False)
    ranks = {bytes(to_byte[c] for c in p): i for p, i in model.items() if p not in specials}
    encoding = tiktoken.Encoding(
        "cl100k-test", pat_str=CL100K_PATTERN, mergeable_ranks=ranks, special_tokens=specials
    )
    return fast, encoding


def test_tiktoken_encoding_matches_the_hf_tokenizer(cl100k_pair):
    fast, encoding = cl100k_pair
    tt_vocab, tt_strs = decode_vocab(encoding)
    hf_vocab, hf_strs = decode_vocab(fast)
    assert [t.byte_string for t in tt_vocab] == [t.byte_string for t in hf_vocab]
    # Without a string form, undecodable tokens are spelled in GPT-2's byte alphabet:
    # what the byte-level HF tokenizer shows for them.
    assert tt_strs == hf_strs
    for token_id in [0, 220, 1000, 100000, 100255]:
        assert tt_vocab[token_id] == encoding.decode_single_token_bytes(token_id)
    assert tt_vocab[100256] == b"" and tt_vocab[100276] == b"<|endofprompt|>"


def test_hf_style_wrapper_around_a_tiktoken_encoding(cl100k_pair):
    _, encoding = cl100k_pair

    class QwenStyleTokenizer:  # like Qwen's QWenTokenizer: .tokenizer is the Encoding
        name_or_path = "qwen-style"

        def __init__(self, enc):
            self.tokenizer = enc
            self.special_tokens = dict(enc._special_tokens)

    wrapped, _ = decode_vocab(QwenStyleTokenizer(encoding), vocab_size=100352)
    direct, _ = decode_vocab(encoding)
    assert [t.byte_string for t in wrapped[:100277]] == [t.byte_string for t in direct]
    assert len(wrapped) == 100352


# --- bare tokenizers.Tokenizer and decoders we cannot model ------------------------------


def test_bare_tokenizers_object_matches_the_transformers_wrapper(tokenizer_of):
    directory = tokenizer_dir("llama3")
    bare = Tokenizer.from_file(str(directory / "tokenizer.json"))
    wrapped = tokenizer_of("llama3")
    assert get_byte_vocab(bare) == get_byte_vocab(wrapped)


@pytest.fixture(scope="module")
def byte_order_alphabet(gpt2_alphabet):
    alphabet = gpt2_alphabet()
    return [alphabet[b] for b in range(256)]


def _char_bpe(decoder, alphabet):
    """A one-character-per-token BPE over ``alphabet`` (no merges) with ``decoder``."""
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoder
    return PreTrainedTokenizerFast(tokenizer_object=backend)


def test_a_decoder_step_we_do_not_model_fails_the_round_trip(byte_order_alphabet):
    # Declares ByteLevel, but also rewrites "a" to "b": our bytes say "a".
    decoder = decoders.Sequence([decoders.ByteLevel(), decoders.Replace("a", "b")])
    tok = _char_bpe(decoder, byte_order_alphabet)
    with pytest.raises(UnsupportedTokenizerError, match="do not round-trip"):
        decode_vocab(tok)


def test_the_same_tokenizer_without_the_extra_step_is_exact(byte_order_alphabet):
    tok = _char_bpe(decoders.ByteLevel(), byte_order_alphabet)
    byte_vocab, _ = decode_vocab(tok)
    assert [t.byte_string for t in byte_vocab] == [bytes([b]) for b in range(256)]


@pytest.mark.parametrize(
    ("decoder", "name"),
    [
        (decoders.BPEDecoder(suffix="</w>"), "BPEDecoder"),
        (decoders.CTC(), "CTC"),
        (
            decoders.Sequence([decoders.Replace("x", "y"), decoders.Strip(" ", 1, 0)]),
            r"Sequence\[Replace, Strip\]",
        ),
    ],
)
def test_other_declared_decoders_are_unsupported_by_name(decoder, name, byte_order_alphabet):
    tok = _char_bpe(decoder, byte_order_alphabet)
    with pytest.raises(UnsupportedTokenizerError, match=f"decoder is {name}"):
        decode_vocab(tok)


def test_no_decoder_and_not_the_byte_alphabet_is_unsupported():
    tok = _char_bpe(None, ["a", "b", " ", "\u2581x"])
    with pytest.raises(UnsupportedTokenizerError, match="declares no decoder"):
        decode_vocab(tok)


def test_no_decoder_but_the_byte_alphabet_is_guessed_and_checked(byte_order_alphabet):
    tok = _char_bpe(None, byte_order_alphabet)
    byte_vocab, _ = decode_vocab(tok)
    assert [t.byte_string for t in byte_vocab] == [bytes([b]) for b in range(256)]


def test_an_object_that_is_no_tokenizer_is_unsupported():
    with pytest.raises(UnsupportedTokenizerError, match="exposes no backend_tokenizer"):
        decode_vocab(object())
