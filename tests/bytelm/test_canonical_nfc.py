"""The canonicality rule behind an NFC normalizer (Qwen3), held to the tokenizer's encoder.

Qwen3 encodes ``x`` as its byte-level BPE of ``NFC(x)``: the canonical token strings are
the prefixes of encodings of NFC texts (genlm_bytelm/exact/canonical/nfc.py). Random
strings mix combining marks, precomposed and decomposed letters and Hangul jamo:

* every prefix of the encoder's tokens is accepted, and the whole is ``complete``;
* token strings that spell a text that is not NFC (the tokenizer's tokens of the text
  with the normalizer switched off) are rejected;
* prefix canonicality agrees with the oracle's search over continuations by the encoder,
  on random tokenizations; the vectorised mask equals the one-token answers.
"""

from __future__ import annotations

import random
import unicodedata

import numpy as np
import pytest
from byte_oracle import ByteOracle
from transformers import AutoTokenizer

from genlm_bytelm import CanonicalityUnsupportedError
from genlm_bytelm.exact.canonical import EMPTY, CanonicalFilter
from genlm_bytelm.exact.canonical.spec import read_spec
from genlm_core.tokenization import decode_vocab

#: Pieces of random strings: ASCII, precomposed and decomposed letters, marks that
#: compose, reorder or stand alone, Hangul syllables and jamo, CJK, emoji.
ALPHABET = list("ab e1 .,'\n-") + [" ", "  ", "'s", "中", "😀", "é", "e\u0301", "\u0301"]
ALPHABET += ["\u0323", "\u0301\u0323", "\u0323\u0301", "a\u0308", "ä", "\u0308", "\u0338"]
ALPHABET += ["한", "\u1112\u1161\u11ab", "\u1100", "\u1161", "\u11a8", "か", "\u3099", "が"]
ALPHABET += ["\u05b0", "\u0915\u093c", "Å", "A\u030a", "\u212b", "\u0345", "ω"]


class NFCTok:
    def __init__(self, path):
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.byte_vocab = decode_vocab(self.tokenizer)[0]
        self.filter = CanonicalFilter(self.tokenizer, self.byte_vocab)
        self.oracle = ByteOracle(None, self.tokenizer)
        raw = AutoTokenizer.from_pretrained(path).backend_tokenizer
        raw.normalizer = None
        self.raw = raw  # the same tokenizer without its normalizer

    def encode(self, text):
        return self.oracle.encoder.encode(text, add_special_tokens=False).ids

    def accepts(self, ids):
        pending = EMPTY
        for t in ids:
            if not self.filter.valid_next(pending, t):
                return False, pending
            pending = self.filter.extend(pending, t)
        return True, pending


@pytest.fixture(scope="module")
def qwen(asset_tokenizer_dir):
    return NFCTok(str(asset_tokenizer_dir("qwen3")))


def random_strings(n, seed):
    rng = random.Random(seed)
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 8))) for _ in range(n)]


def test_the_spec_reads_the_normalizers(qwen, asset_tokenizer_dir):
    assert read_spec(qwen.tokenizer).normalizer == "NFC"
    deepseek = AutoTokenizer.from_pretrained(str(asset_tokenizer_dir("deepseek-v4")))
    assert read_spec(deepseek).normalizer is None  # an empty Sequence does nothing
    other = AutoTokenizer.from_pretrained(str(asset_tokenizer_dir("qwen3")))
    from tokenizers.normalizers import NFKC

    other.backend_tokenizer.normalizer = NFKC()
    with pytest.raises(CanonicalityUnsupportedError, match="NFKC"):
        read_spec(other)


def test_unicode_disagreements_are_found_and_never_reasoned_about(qwen):
    """Python's unicodedata composes U+11935 U+11930; the tokenizer's NFC does not."""
    nfc = qwen.filter.nfc
    for ch in nfc.disagreements:
        assert not nfc.inert(ch)
    if unicodedata.normalize("NFC", "\U00011935\U00011930") == "\U00011938":
        assert "\U00011930" in nfc.disagreements
    assert all(nfc.inert(rep) for rep in qwen.filter.classes.reps)
    assert nfc.inert("a") and not nfc.inert("\u0301") and not nfc.inert("\u1161")


def test_every_canonical_tokenization_is_accepted(qwen, thorough):
    for text in random_strings(10_000 if thorough else 1_000, seed=11):
        ids = qwen.encode(text)
        ok, pending = qwen.accepts(ids)
        assert ok, (text, ids)
        assert qwen.filter.complete(pending), text


def test_token_strings_of_texts_not_in_nfc_are_rejected(qwen, thorough):
    checked = 0
    for text in random_strings(6_000 if thorough else 600, seed=12):
        if unicodedata.is_normalized("NFC", text):
            continue
        ids = qwen.raw.encode(text, add_special_tokens=False).ids
        assert qwen.filter.spec.backend.decode(ids) == text
        ok, _ = qwen.accepts(ids)
        assert not ok, (text, ids)
        checked += 1
    assert checked > 100


def random_tokenization(tok, data, rng):
    out, pos = [], 0
    while pos < len(data):
        options = [
            t
            for n in range(1, min(len(data) - pos, 16) + 1)
            for t in tok.oracle.starting_with(data[pos : pos + n])
            if tok.oracle.vocab[t] == data[pos : pos + n] and t not in tok.oracle.special
        ]
        t = rng.choice(options)
        out.append(t)
        pos += len(tok.oracle.vocab[t])
    return out


def encoder_confirms(tok, ids):
    """The encoder's tokens of the text completed by one of the filter's witnesses start with
    ``ids`` (the oracle tries a fixed list of characters after a split one; Qwen3 writes
    ``"È다"`` as ``\xc3 | \x88다``, a completion outside that list)."""
    data = b"".join(tok.oracle.vocab[t] for t in ids)
    for _, completing in tok.filter._trail.get(ids[-1], ()):
        rest = b"".join(tok.oracle.vocab[t] for t in completing)
        text = (data + rest).decode("utf-8")
        for future in ("", " ", "a", "\n"):
            if tok.encode(text + future)[: len(ids)] == list(ids):
                return True
    return False


def test_prefix_canonicality_matches_the_encoder(qwen, thorough):
    """Random tokenizations of random strings, every prefix: filter == encoder search."""
    rng = random.Random(13)
    disagreements = []
    for text in random_strings(400 if thorough else 60, seed=14):
        ids = random_tokenization(qwen, text.encode(), rng)
        pending = EMPTY
        for k in range(len(ids)):
            ours = qwen.filter.valid_next(pending, ids[k])
            theirs = qwen.oracle.canonical(tuple(ids[: k + 1])) or encoder_confirms(
                qwen, ids[: k + 1]
            )
            if ours != theirs:
                disagreements.append((text, [qwen.byte_vocab[i] for i in ids[: k + 1]], ours))
            if not ours:
                break
            pending = qwen.filter.extend(pending, ids[k])
    assert not disagreements


def test_mask_equals_one_token_answers(qwen):
    rng = np.random.default_rng(15)
    dependent = qwen.filter.nfc_rule._tokens.dependent  # tokens starting with a mark...
    for text in ["e", "a\u0323", "\u1100", "か", "x ", "中\u0301", "Å"]:
        ids = qwen.encode(text)
        pending = EMPTY
        for t in ids:
            pending = qwen.filter.extend(pending, t)
        mask = qwen.filter.mask(pending)
        sample = [*rng.choice(qwen.filter.n, 800, replace=False), *dependent.tolist()]
        wrong = [int(t) for t in sample if bool(mask[t]) != qwen.filter.valid_next(pending, t)]
        assert not wrong, (text, [qwen.byte_vocab[t] for t in wrong[:5]])


def test_deepseek_encodings_are_accepted(asset_tokenizer_dir, thorough):
    """DeepSeek-V4: an empty normalizer Sequence, three Splits, ByteLevel(trim_offsets)."""
    tok = NFCTok(str(asset_tokenizer_dir("deepseek-v4")))
    assert tok.filter.nfc is None
    rng = random.Random(16)
    pieces = [*ALPHABET, "ひら", "カタ", "123456", "x.Ab", "!?", "\u00a0", "\r\n"]
    for _ in range(3_000 if thorough else 150):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 8)))
        ids = tok.encode(text)
        ok, pending = tok.accepts(ids)
        assert ok, (text, ids)
        assert tok.filter.complete(pending), text


def test_the_last_segment_decides_what_keeps_text_nfc(qwen):
    """``is_nfc(A + D) == is_nfc(segment(A) + D)`` for NFC ``A``; inert characters keep NFC.

    What the filter rests on, on random texts of marks (several classes), starters that
    compose, Hangul jamo, and characters of planes 0-2 sampled at random.
    """
    nfc = qwen.filter.nfc
    rng = random.Random(17)
    sampled = [chr(rng.randrange(0x30000)) for _ in range(3000)]
    sampled = [c for c in sampled if not 0xD800 <= ord(c) < 0xE000]
    pool = [*"aeoAuxn.1 ", *ALPHABET, "\u0f71", "\u0f72", "\u0b47", "\u0b3e", *sampled[:300]]
    inert = [c for c in sampled if nfc.inert(c)]
    checked = 0
    for _ in range(20_000):
        a = "".join(rng.choice(pool) for _ in range(rng.randint(0, 5)))
        if not nfc.is_nfc(a):
            continue
        d = "".join(rng.choice(pool) for _ in range(rng.randint(1, 3)))
        assert nfc.is_nfc(a + d) == nfc.is_nfc(nfc.last_segment(a) + d), (a, d)
        assert nfc.is_nfc(a + rng.choice(inert)), a
        checked += 1
    assert checked > 5000
