"""A real, in-memory byte-level tokenizer: 256 byte tokens plus an end-of-text token.

Built with the ``tokenizers`` library (a ByteLevel BPE with no merges), wrapped in
``PreTrainedTokenizerFast``, so it behaves like any Hugging Face tokenizer and needs no
download. Token id ``b`` is the single byte ``b``; id 256 is ``<|endoftext|>``.
"""

from __future__ import annotations

from functools import cache
from typing import Any

__all__ = ["ByteTokenizer"]

EOS = "<|endoftext|>"


@cache
def _byte_level_alphabet() -> list[str]:
    """GPT-2's printable stand-in character for each byte, in byte order."""
    visible = (
        list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    )
    chars = {b: chr(b) for b in visible}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def ByteTokenizer() -> Any:  # noqa: N802 - reads like a class to users
    """Build the byte tokenizer (a ``PreTrainedTokenizerFast``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {ch: i for i, ch in enumerate(_byte_level_alphabet())}
    vocab[EOS] = 256
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS,
        bos_token=EOS,
        clean_up_tokenization_spaces=False,
    )
