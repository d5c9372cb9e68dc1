"""Messages that clients match keep genlm-backend's words, with our explanation after them.

genlm-control 0.4.1's tests expect ``decode_vocab``'s ``ValueError`` on a WordPiece
tokenizer to contain "Could not decode byte representation" (genlm-backend 0.3.1's
words); every refusal of ``decode_vocab`` starts with them.
"""

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import BertTokenizer, PreTrainedTokenizerFast, SentencePieceBackend

from genlm_assets import tokenizer_dir
from genlm_core.errors import UnsupportedTokenizerError
from genlm_core.tokenization import decode_vocab

WORDS = "Could not decode byte representation"


def test_genlm_controls_wordpiece_case():
    """genlm-control's test_from_llm_extract_merges_fallback, on this project's BERT asset."""
    tokenizer = BertTokenizer.from_pretrained(tokenizer_dir("bert-minilm"))
    with pytest.raises(ValueError, match=WORDS) as info:
        decode_vocab(tokenizer)
    message = str(info.value)
    assert message.startswith(f"{WORDS} of the vocabulary of tokenizer ")
    assert "its decoder is WordPiece (model WordPiece)" in message  # our explanation follows
    assert isinstance(info.value, UnsupportedTokenizerError)


def test_genlm_backend_says_the_same_words_there():
    from genlm.backend.tokenization import decode_vocab as reference

    tokenizer = BertTokenizer.from_pretrained(tokenizer_dir("bert-minilm"))
    with pytest.raises(ValueError, match=WORDS):
        reference(tokenizer)


def _char_bpe(decoder, alphabet):
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoder
    return PreTrainedTokenizerFast(tokenizer_object=backend)


UNSUPPORTED = {
    "a decoder step we do not model (round trip)": lambda alphabet: _char_bpe(
        decoders.Sequence([decoders.ByteLevel(), decoders.Replace("a", "b")]), alphabet
    ),
    "another declared decoder": lambda alphabet: _char_bpe(decoders.CTC(), alphabet),
    "no decoder, not the byte alphabet": lambda _: _char_bpe(None, ["a", "b", " ", "\u2581x"]),
    "SentencePiece without byte fallback": lambda _: SentencePieceBackend(
        vocab_file=str(tokenizer_dir("unigram-botchan") / "spiece.model")
    ),
    "no tokenizer at all": lambda _: object(),
}


@pytest.mark.parametrize("make", UNSUPPORTED.values(), ids=UNSUPPORTED.keys())
def test_every_refusal_starts_with_genlm_backends_words(make, gpt2_alphabet):
    alphabet = gpt2_alphabet()
    with pytest.raises(UnsupportedTokenizerError) as info:
        decode_vocab(make([alphabet[b] for b in range(256)]))
    assert str(info.value).startswith(WORDS), str(info.value)
