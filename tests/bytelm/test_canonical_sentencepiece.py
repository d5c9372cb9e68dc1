"""The SentencePiece filter (Llama-2, Mistral v0.1) held to the tokenizer's own encoder.

* Every prefix of the encoder's tokens of thousands of random texts is accepted token
  by token, and the whole encoding may end the text (``complete``).
* On random tokenizations of random byte strings (other splits, byte tokens for
  characters that have pieces, a literal ``▁``, no dummy space), the filter accepts a
  token exactly when the oracle's encoder search finds a text it starts.
* The mask equals the one-token answer; pair tests equal the tokenizer's BPE.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from sp_byte_oracle import SentencePieceOracle
from transformers import AutoTokenizer

from genlm_bytelm import CanonicalityUnsupportedError
from genlm_bytelm.exact.canonical import EMPTY
from genlm_bytelm.exact.canonical.select import canonical_filter
from genlm_bytelm.exact.canonical.sentencepiece import SentencePieceFilter
from genlm_core.tokenization import decode_vocab

#: Gemma 3's 262k pieces take ~20-40 s to load and build: nightly only.
FAMILIES = ["llama2", "mistral-v1-spm", pytest.param("gemma3", marks=pytest.mark.thorough)]
DUMMY_PREFIX = ["llama2", "mistral-v1-spm"]
#: Leading spaces, runs of spaces, digits, punctuation, newlines (byte fallback in these
#: vocabularies), characters outside the vocabulary, multi-byte characters, a literal ▁.
ALPHABET = list("ab cdeA1 23 .,!'\n\t-s") + ["é", "中", "文", "😀", "  ", "   ", "\n\n"]
ALPHABET += ["ꙮ", "𝔘", "\x00", "\x07", "ǅ", "\u2581", "the", "ing", " the", "123", "\r\n"]


class Tok:
    def __init__(self, path):
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.byte_vocab = decode_vocab(self.tokenizer)[0]
        self.filter = canonical_filter(self.tokenizer, self.byte_vocab)
        self.oracle = SentencePieceOracle(None, self.tokenizer)

    def encode(self, text):
        return self.oracle.encoder.encode(text, add_special_tokens=False).ids

    def pending(self, ids):
        p = EMPTY
        for t in ids:
            p = self.filter.extend(p, t)
        return p


@pytest.fixture(scope="module")
def toks(asset_tokenizer_dir, asset_model_dir):
    cache = {}

    def get(name):
        if name not in cache:
            path = asset_model_dir(name) if name.startswith("tiny") else asset_tokenizer_dir(name)
            cache[name] = Tok(str(path))
        return cache[name]

    return get


def random_strings(n, seed, length=10):
    """Random texts, without runs of literal ``▁`` (Gemma 3 parses those as added tokens,
    outside what the byte-level LM models: see ``excluded_added``)."""
    rng = random.Random(seed)
    out = ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, length))) for _ in range(n)]
    return [s for s in out if "\u2581\u2581" not in s]


@pytest.mark.parametrize("name", [*FAMILIES, "tiny-llama-spm"])
def test_the_filter_is_the_sentencepiece_one(toks, name):
    assert isinstance(toks(name).filter, SentencePieceFilter)
    assert toks(name).filter.spec.dummy_prefix == (name != "gemma3")


@pytest.mark.parametrize("name", FAMILIES)
def test_every_prefix_of_the_encoding_is_canonical(toks, name):
    tok = toks(name)
    canon, accepted = tok.filter, 0
    for text in random_strings(3000, seed=len(name)):
        ids = tok.encode(text)
        pending = EMPTY
        for k, t in enumerate(ids):
            assert canon.valid_next(pending, t), (text, ids, k)
            assert canon.mask(pending)[t], (text, ids, k)
            pending = canon.extend(pending, t)
            accepted += 1
        assert canon.complete(pending), (text, ids)
    assert accepted > 15_000


@pytest.mark.parametrize("name", DUMMY_PREFIX)
def test_the_bytes_start_with_the_dummy_space(toks, name):
    """Every non-empty encoding spells a space first; no first token may lack it."""
    tok = toks(name)
    for text in random_strings(300, seed=3):
        ids = tok.encode(text)
        if ids:
            assert tok.byte_vocab[ids[0]].startswith(b" "), (text, ids)
    first = tok.filter.mask(EMPTY)
    assert first.any()
    assert all(tok.byte_vocab[i].startswith(b" ") for i in np.flatnonzero(first))


def random_tokenization(tok, data, rng):
    """A random token string spelling ``data`` (any split, byte tokens included)."""
    oracle, out, pos = tok.oracle, [], 0
    while pos < len(data):
        options = [
            t
            for n in range(1, min(len(data) - pos, 16) + 1)
            for t in oracle._exact.get(data[pos : pos + n], ())
            if t not in oracle.special
        ]
        t = rng.choice(options)
        out.append(t)
        pos += len(oracle.vocab[t])
    return out


@pytest.mark.parametrize("name", FAMILIES)
def test_prefix_canonicality_equals_the_encoder_search(toks, name):
    tok = toks(name)
    rng = random.Random(7)
    checked = rejected = 0
    for text in random_strings(120, seed=11, length=5):
        # a fixed order (not a set's, which varies with the hash seed): the rng is shared
        for data in dict.fromkeys([(" " + text).encode(), text.encode()]):
            ids = random_tokenization(tok, data, rng) if data else []
            pending = EMPTY
            for k, t in enumerate(ids):
                want = tok.oracle.canonical(tuple(ids[: k + 1]))
                got = tok.filter.valid_next(pending, t)
                assert got == want, (data, ids[: k + 1], got)
                checked += 1
                if not got:
                    rejected += 1
                    break
                pending = tok.filter.extend(pending, t)
    assert checked > 300 and rejected > 60


@pytest.mark.parametrize("name", FAMILIES)
def test_text_ending_inside_a_fallback_character(toks, name):
    """A byte run may stop inside a character only if some absent character completes it."""
    tok = toks(name)
    for text in ["x ꙮ", "𝔘", "a\x07"]:
        ids = tok.encode(text)
        pending = EMPTY
        for k, t in enumerate(ids):
            pending = tok.filter.extend(pending, t)
            want = tok.oracle.complete(tuple(ids[: k + 1]))
            assert tok.filter.complete(pending) == want, (text, k)
    # 'é' is a piece: its bytes as byte tokens are never canonical; 0xC3 may start
    # another character (U+00C0..U+00FF) only if one of them is no piece
    vocab = tok.tokenizer.get_vocab()
    e1, e2 = (vocab[f"<0x{b:02X}>"] for b in "é".encode())
    after = tok.filter.extend(EMPTY, tok.encode("x")[0])
    absent = any(chr(c) not in vocab for c in range(0xC0, 0x100))
    assert tok.filter.valid_next(after, e1) == absent
    assert not tok.filter.valid_next(tok.filter.extend(after, e1), e2)
    a1 = vocab["<0x{:02X}>".format("ꙮ".encode()[0])]
    assert "ꙮ" not in vocab and tok.filter.valid_next(after, a1)


@pytest.mark.parametrize("name", FAMILIES)
def test_mask_equals_one_token_answers(toks, name):
    tok = toks(name)
    rng = random.Random(5)
    for text in random_strings(40, seed=13):
        ids = tok.encode(text)
        for k in range(len(ids) + 1):
            pending = tok.pending(ids[:k])
            mask = tok.filter.mask(pending)
            sample = [rng.randrange(len(mask)) for _ in range(60)]
            sample += [int(i) for i in np.flatnonzero(mask)[:20]]
            for t in sample:
                assert mask[t] == tok.filter.valid_next(pending, t), (text, k, t)


@pytest.mark.parametrize("name", FAMILIES)
def test_pair_tests_equal_the_tokenizers_bpe(toks, name):
    """``invalid_after`` and ``pair_invalid`` over characters: the tokenizer's BPE of the text."""
    tok = toks(name)
    pairs, model = tok.filter.pairs, tok.filter.spec.backend.model
    pieces = [i for i in range(len(tok.byte_vocab)) if tok.filter.piece_ok[i]]
    rng = random.Random(1)
    for a in rng.sample(pieces, 30):
        row = pairs.invalid_after(a)
        valid = np.flatnonzero(~row & tok.filter.piece_ok)
        picks = rng.sample(pieces, 150) + [int(c) for c in valid[:50]]
        pairs._cache.clear()  # pair_invalid answers from its spines, not the vector
        for c in picks:
            text = pairs.strings[a] + pairs.strings[c]
            want = [t.id for t in model.tokenize(text)] == [a, c]
            assert (not row[c]) == want, (pairs.strings[a], pairs.strings[c])
            assert pairs.pair_invalid(a, c) == (not want), (pairs.strings[a], pairs.strings[c])


def test_other_families_still_raise(asset_tokenizer_dir):
    tok = AutoTokenizer.from_pretrained(str(asset_tokenizer_dir("unigram-botchan")))
    with pytest.raises(CanonicalityUnsupportedError, match="Unigram|not byte-level BPE"):
        canonical_filter(tok, [])  # read_spec refuses before the bytes are read


def test_bytes_other_than_the_pieces_raise(toks):
    """A byte vocabulary that does not spell ``▁`` as a space is refused, not guessed."""
    tok = toks("llama2")
    wrong = [b.replace(b" ", "\u2581".encode()) for b in tok.byte_vocab]
    with pytest.raises(CanonicalityUnsupportedError, match="spells"):
        SentencePieceFilter(tok.tokenizer, wrong)


@pytest.mark.thorough
def test_gemma_whitespace_runs_are_pieces_and_tags_are_not(toks):
    """Gemma 3's added newline/tab runs are BPE's own tokens; its added tags never occur."""
    tok = toks("gemma3")
    vocab = tok.tokenizer.get_vocab()
    for piece in ["\n", "\n\n", "\t", "\u2581\u2581"]:
        assert tok.filter.texts[vocab[piece]] is not None, piece
    for tag in ["<table>", "<unused0>", "<bos>", "<eos>"]:
        assert tok.filter.texts[vocab[tag]] is None, tag
        assert not tok.filter.mask(EMPTY)[vocab[tag]]


def test_an_unknown_normalizer_is_refused(asset_tokenizer_dir):
    """A normalizer outside the recognised families (here NFKC) raises, naming it."""
    from tokenizers import normalizers

    tok = AutoTokenizer.from_pretrained(str(asset_tokenizer_dir("llama2")))
    byte_vocab = decode_vocab(tok)[0]
    tok.backend_tokenizer.normalizer = normalizers.NFKC()
    with pytest.raises(CanonicalityUnsupportedError, match="NFKC"):
        canonical_filter(tok, byte_vocab)
