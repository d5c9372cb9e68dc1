"""decode_vocab on real tokenizers of every supported family.

Tokenizers come from ``genlm_assets`` (registry packages, cached; no hub).
Each family is loaded once (module-scoped, parametrized fixture), so pytest runs all
tests of one tokenizer before loading the next.
"""

import random
import re
from dataclasses import dataclass

import numpy as np
import pytest

from genlm_core.errors import GenlmError, UnsupportedTokenizerError
from genlm_core.tokenization import (
    InvalidArgumentError,
    Token,
    decode_vocab,
    get_byte_vocab,
)

BYTE_LEVEL, SENTENCEPIECE = "byte-level", "sentencepiece"
# name -> (decoding family, whether encoding adds SentencePiece's dummy-prefix space)
FAMILIES = {
    "gpt2-npm": (BYTE_LEVEL, False),
    "gpt2-whisper": (BYTE_LEVEL, False),
    "llama2": (SENTENCEPIECE, True),
    "mistral-v1-spm": (SENTENCEPIECE, True),
    "llama3": (BYTE_LEVEL, False),
    "llama3-meta": (BYTE_LEVEL, False),
    "qwen3": (BYTE_LEVEL, False),
    "qwen-tiktoken": (BYTE_LEVEL, False),
    "gemma3": (SENTENCEPIECE, False),
    "deepseek-v4": (BYTE_LEVEL, False),
    "cl100k": (BYTE_LEVEL, False),
    "o200k": (BYTE_LEVEL, False),
}
# genlm-backend 0.3.1 crashes on vocabularies with holes in the id range.
REFERENCE_FAILS = {"cl100k", "o200k"}
_BYTE_PIECE = re.compile(r"<0x[0-9A-Fa-f]{2}>")


@dataclass
class Family:
    name: str
    kind: str
    dummy_prefix: bool
    tok: object
    byte_vocab: list
    str_vocab: list
    added: set
    holes: list
    byte_pieces: set  # SentencePiece byte-fallback ids


def _used_ids(tok):
    model = tok.backend_tokenizer.get_vocab(with_added_tokens=False)
    return set(model.values()) | set(tok.added_tokens_decoder)


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, tokenizer_of, decoded_vocab):
    name = request.param
    kind, dummy_prefix = FAMILIES[name]
    tok = tokenizer_of(name)
    byte_vocab, str_vocab = decoded_vocab(name)  # decode_vocab(tok), shared with other modules
    used = _used_ids(tok)
    holes = [i for i in range(max(used) + 1) if i not in used]
    byte_pieces = set()
    if kind == SENTENCEPIECE:
        ids = [i for i in range(len(byte_vocab)) if i not in holes]
        pieces = tok.convert_ids_to_tokens(ids)
        byte_pieces = {i for i, p in zip(ids, pieces, strict=True) if _BYTE_PIECE.fullmatch(p)}
    return Family(
        name,
        kind,
        dummy_prefix,
        tok,
        byte_vocab,
        str_vocab,
        set(tok.added_tokens_decoder),
        holes,
        byte_pieces,
    )


def test_one_token_per_id_in_id_order(family):
    bv = family.byte_vocab
    assert len(bv) == max(_used_ids(family.tok)) + 1
    assert len(family.str_vocab) == len(bv)
    assert all(type(t) is Token for t in bv)
    assert [t.token_id for t in bv] == list(range(len(bv)))
    assert get_byte_vocab(family.tok) == [t.byte_string for t in bv]
    if family.holes:  # the id range is wider than the tokenizer's length
        assert len(bv) == len(family.tok) + len(family.holes)


def _anchor(tok):
    """A token put in front of every sequence we decode.

    SentencePiece decoders drop the leading space of the *decoded text* (Llama-2's
    ``Strip`` decoder, ``Metaspace``'s prepend scheme): ``decode([▁Hello])`` is
    ``"Hello"`` although the token's bytes are ``b" Hello"``. With a fixed token
    first, every later token keeps its space, and we compare what follows the
    anchor's own decoding. Byte-level decoders need no anchor but get the same one.
    """
    (anchor,) = tok.encode("a", add_special_tokens=False)[-1:]
    return anchor, tok.decode([anchor], clean_up_tokenization_spaces=False)


def _expected_text(family, ids):
    """How the tokenizer's decoder renders our bytes when they are not valid UTF-8.

    Byte-level decoders use ``String::from_utf8_lossy`` on the joined bytes (same
    replacement rule as Python's ``errors="replace"``). SentencePiece's ByteFallback
    decoder turns each run of byte pieces that is not valid UTF-8 into one U+FFFD per
    byte; every other piece is text.
    """
    data = b"".join(family.byte_vocab[i] for i in ids)
    if family.kind == BYTE_LEVEL:
        return data.decode("utf-8", errors="replace")
    out, run = [], b""
    for i in [*ids, None]:
        if i is not None and i in family.byte_pieces:
            run += family.byte_vocab[i]
            continue
        try:
            out.append(run.decode("utf-8"))
        except UnicodeDecodeError:
            out.append("\ufffd" * len(run))
        run = b""
        if i is not None:
            out.append(family.byte_vocab[i].decode("utf-8"))
    return "".join(out)


def test_random_id_sequences_decode_like_the_tokenizer(family):
    """200 seeded sequences of 1..20 ids (no added/special tokens, no holes)."""
    tok = family.tok
    skip = family.added | set(family.holes)
    candidates = [i for i in range(len(family.byte_vocab)) if i not in skip]
    anchor, anchor_text = _anchor(tok)
    rng = random.Random(1234)
    exact = 0
    for _ in range(200):
        ids = rng.choices(candidates, k=rng.randint(1, 20))
        decoded = tok.decode([anchor, *ids], clean_up_tokenization_spaces=False)
        assert decoded.startswith(anchor_text), (ids, decoded)
        rest = decoded[len(anchor_text) :]
        ours = b"".join(family.byte_vocab[i] for i in ids)
        try:
            ours.decode("utf-8")
        except UnicodeDecodeError:
            # Not valid UTF-8 (a token split a character): the tokenizer's str output
            # has replacement characters, so compare with its replacement rule.
            assert rest == _expected_text(family, ids), ids
        else:
            assert rest.encode() == ours, ids
            exact += 1
    assert exact >= 20, f"only {exact} of 200 sequences were valid UTF-8"


TEXTS = [
    "Hello, world!",
    "Tabs\tand  double  spaces,\nnew lines\n\n\nand trailing space ",
    "naïve café — “quotes” ’•¶∂ƒ˙∆£Ħ爨ൠᅘ∰፨",
    "你好，世界。こんにちは、안녕하세요 Привет мир",
    "emoji 🤗🚀 and a family 👩‍👩‍👧 and flags 🇫🇷",
    "def f(x):\n    return x ** 2  # code {}[]<>|~`\n",
    "Ünïcödé ÀÉÎÕÜ ß ø å ÿ \u00a0nbsp soft\u00adhyphen",
]


@pytest.mark.parametrize("text", TEXTS)
def test_encoding_then_joining_bytes_gives_the_text_back(family, text):
    ids = family.tok.encode(text, add_special_tokens=False)
    ours = b"".join(family.byte_vocab[i] for i in ids)
    # Llama-2/Mistral SentencePiece encoders prepend a space (the "dummy prefix").
    expected = (" " + text if family.dummy_prefix else text).encode()
    assert ours == expected


def test_added_tokens_are_their_text(family):
    for token_id, added in family.tok.added_tokens_decoder.items():
        text = added.content
        if family.kind == SENTENCEPIECE:  # its decoder reads "▁" as a space
            text = text.replace("\u2581", " ")
        assert family.byte_vocab[token_id] == text.encode()
        assert family.str_vocab[token_id] == text


def test_holes_are_empty_tokens(family):
    assert bool(family.holes) == (family.name in REFERENCE_FAILS)
    for i in family.holes:
        assert family.byte_vocab[i].token_id == i
        assert family.byte_vocab[i].byte_string == b""
        assert family.str_vocab[i] == ""
        assert family.tok.convert_ids_to_tokens(i) is None  # why genlm-backend crashes


def test_str_vocab_is_utf8_where_valid_else_the_tokenizer_string(family):
    for i, token in enumerate(family.byte_vocab):
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            assert family.str_vocab[i] == family.tok.convert_ids_to_tokens(i)
        else:
            assert family.str_vocab[i] == text


def test_identical_to_genlm_backend(family, reference_decoded_vocab):
    from genlm.backend.tokenization import decode_vocab as reference

    if family.name in REFERENCE_FAILS:
        # genlm-backend 0.3.1 crashes on holes (convert_ids_to_tokens gives None), so
        # there is nothing to be identical to; test_holes_* cover these.
        with pytest.raises(TypeError):
            reference(family.tok)
        return
    ref_bytes, ref_strs = reference_decoded_vocab(family.name)  # reference(family.tok)
    assert [t.byte_string for t in family.byte_vocab] == [t.byte_string for t in ref_bytes]
    assert [t.token_id for t in ref_bytes] == list(range(len(ref_bytes)))
    assert family.str_vocab == ref_strs


# --- specific families ------------------------------------------------------------------


@pytest.fixture(scope="module")
def cl100k(tokenizer_of):
    return tokenizer_of("cl100k")


def test_cl100k_holes_are_the_unused_ids(decoded_vocab):
    byte_vocab, str_vocab = decoded_vocab("cl100k")
    assert len(byte_vocab) == 100277  # largest id (<|endofprompt|>) is 100276
    empty = [i for i, t in enumerate(byte_vocab) if t.byte_string == b""]
    assert empty == [100256, *range(100261, 100276)]
    assert byte_vocab[100257] == b"<|endoftext|>"
    assert byte_vocab[100276] == b"<|endofprompt|>"


def test_vocab_size_pads_with_empty_tokens(cl100k):
    byte_vocab, str_vocab = decode_vocab(cl100k, vocab_size=100352)
    assert len(byte_vocab) == len(str_vocab) == 100352
    assert [t.token_id for t in byte_vocab[-80:]] == list(range(100272, 100352))
    assert all(t.byte_string == b"" for t in byte_vocab[100277:])
    assert str_vocab[100277:] == [""] * 75
    unpadded, _ = decode_vocab(cl100k, vocab_size=100277)
    assert [t.byte_string for t in unpadded] == [t.byte_string for t in byte_vocab[:100277]]
    numpy_width, _ = decode_vocab(cl100k, vocab_size=np.int64(100352))  # e.g. from a config
    assert len(numpy_width) == 100352


def test_vocab_size_smaller_than_the_tokenizer_is_an_error(cl100k):
    # 100261 == len(tokenizer), but ids go up to 100276.
    with pytest.raises(InvalidArgumentError, match=r"vocab_size=100261.*100276.*100277"):
        decode_vocab(cl100k, vocab_size=100261)


@pytest.mark.parametrize("bad", [-1, 1.5, "100352", True])
def test_vocab_size_must_be_a_non_negative_int(cl100k, bad):
    with pytest.raises(InvalidArgumentError, match="vocab_size"):
        decode_vocab(cl100k, vocab_size=bad)


def test_several_ids_can_share_bytes(tokenizer_of, decoded_vocab):
    tok = tokenizer_of("llama2")
    byte_vocab, _ = decoded_vocab("llama2")
    space_piece = tok.convert_tokens_to_ids("\u2581")
    byte_piece = tok.convert_tokens_to_ids("<0x20>")
    a, b = byte_vocab[space_piece], byte_vocab[byte_piece]
    assert a.byte_string == b.byte_string == b" "
    assert a != b and len({a, b}) == 2
    assert (a.token_id, b.token_id) == (space_piece, byte_piece)
    by_bytes = {}
    for t in byte_vocab:
        by_bytes.setdefault(t.byte_string, []).append(t.token_id)
    assert by_bytes[b" "] == sorted([space_piece, byte_piece])


@pytest.mark.parametrize("name", ["gpt2-npm", "llama2"])
@pytest.mark.parametrize("fallback", ["latin1", "replace", "tokenizer"])
def test_byte2str_fallbacks_match_genlm_backend(name, fallback, tokenizer_of):
    from genlm.backend.tokenization import decode_vocab as reference

    tok = tokenizer_of(name)
    byte_vocab, str_vocab = decode_vocab(tok, byte2str_fallback=fallback)
    _, ref_strs = reference(tok, byte2str_fallback=fallback)
    assert str_vocab == ref_strs
    invalid = [t for t in byte_vocab if not _is_utf8(t)]
    assert invalid  # both tokenizers have tokens that split a character
    for t in invalid:
        if fallback == "latin1":
            assert str_vocab[t.token_id] == t.decode("latin-1")
        elif fallback == "replace":
            assert str_vocab[t.token_id] == t.decode("utf-8", errors="replace")
        else:
            assert str_vocab[t.token_id] == tok.convert_ids_to_tokens(t.token_id)


def _is_utf8(data):
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_bad_byte2str_fallback_is_rejected(cl100k):
    with pytest.raises(InvalidArgumentError, match="'utf8'") as info:
        decode_vocab(cl100k, byte2str_fallback="utf8")
    assert isinstance(info.value, ValueError) and isinstance(info.value, GenlmError)
    assert "'tokenizer', 'latin1', 'replace'" in str(info.value)


# --- unsupported tokenizers -------------------------------------------------------------


def test_unigram_without_byte_fallback_is_unsupported(tokenizer_of):
    tok = tokenizer_of("unigram-botchan")
    with pytest.raises(UnsupportedTokenizerError, match="decoder is Metaspace") as info:
        decode_vocab(tok)
    assert "Unigram" in str(info.value) and "byte_fallback" in str(info.value)
    assert isinstance(info.value, ValueError)


def test_bert_wordpiece_asset_is_unsupported(tokenizer_of):
    tok = tokenizer_of("bert-minilm")
    with pytest.raises(UnsupportedTokenizerError, match="decoder is WordPiece"):
        decode_vocab(tok)


def test_in_memory_wordpiece_tokenizer_is_unsupported():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "hello": 3, "world": 4, "##s": 5, "h": 6}
    backend = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece(prefix="##")
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]")
    assert tok.decode(tok.encode("hellos world")) == "hellos world"
    for candidate in (tok, backend):  # a transformers tokenizer or a bare tokenizers.Tokenizer
        with pytest.raises(
            UnsupportedTokenizerError, match=r"decoder is WordPiece \(model WordPiece\)"
        ):
            decode_vocab(candidate)
