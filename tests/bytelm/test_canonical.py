"""The canonicality rule of ExactByteState, held to the tokenizer's own encoder.

* Every prefix of the encoder's tokenization of thousands of random strings is
  accepted, and as a whole text only that tokenization is (``complete``).
* The adjacent-pair rule judged in isolation (``encode(decode([a, c])) == [a, c]``) is
  not exact: it rejects canonical tokenizations (GPT-2 ``"\\n\\n"`` before a letter,
  contractions after punctuation, Llama-3's punctuation+letter pre-tokens); measured
  counts are in docs/bytes-design.md (``python benchmarks/bytes_exact.py rules``).
* Prefix canonicality ("a prefix of the encoding of some continuation") against the
  oracle's encoder search, on random tokenizations of random strings.
* The vectorised mask equals the one-token answer; BPE pair tests equal the
  tokenizer's merges-only BPE.
"""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
from byte_oracle import ByteOracle
from transformers import AutoTokenizer

from genlm_bytelm import CanonicalityUnsupportedError, ExactByteState
from genlm_bytelm.exact.canonical import EMPTY, CanonicalFilter
from genlm_core.testing import ByteTokenizer, MockAsyncLM
from genlm_core.tokenization import decode_vocab

MODELS = ["tiny-gpt2", "tiny-llama3"]
ALPHABET = list("ab cdeA1 23 .,!'\n\t-s") + ["é", "中", "文", "😀", " ", "  ", "\n\n", "'s"]
ALPHABET += ["'ll", "123456", "\u00a0", "x'A", ".A", "\r\n"]


class Tok:
    def __init__(self, path):
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.byte_vocab = decode_vocab(self.tokenizer)[0]
        self.filter = CanonicalFilter(self.tokenizer, self.byte_vocab)
        self.oracle = ByteOracle(None, self.tokenizer)

    def encode(self, text):
        return self.oracle.encoder.encode(text, add_special_tokens=False).ids

    def pending(self, ids):
        p = EMPTY
        for t in ids:
            p = self.filter.extend(p, t)
        return p


@pytest.fixture(scope="module")
def toks(asset_model_dir):
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = Tok(str(asset_model_dir(name)))
        return cache[name]

    return get


def random_strings(n, seed):
    rng = random.Random(seed)
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 8))) for _ in range(n)]


def random_tokenization(tok, data, rng):
    by_bytes = tok.oracle
    out, pos = [], 0
    while pos < len(data):
        options = [
            t
            for n in range(1, min(len(data) - pos, 16) + 1)
            for t in by_bytes.starting_with(data[pos : pos + n])
            if by_bytes.vocab[t] == data[pos : pos + n] and t not in by_bytes.special
        ]
        t = rng.choice(options)
        out.append(t)
        pos += len(by_bytes.vocab[t])
    return out


@pytest.mark.parametrize("model", MODELS)
def test_every_canonical_tokenization_is_accepted(toks, model, thorough):
    tok = toks(model)
    for text in random_strings(20_000 if thorough else 2_000, seed=1):
        ids = tok.encode(text)
        pending = EMPTY
        for k, t in enumerate(ids):
            assert tok.filter.valid_next(pending, t), (text, ids[: k + 1])
            pending = tok.filter.extend(pending, t)
        assert tok.filter.complete(pending), text


@pytest.mark.parametrize("model", MODELS)
def test_as_whole_texts_only_the_encoding_is_complete(toks, model, thorough):
    """Among all tokenizations of a text, exactly the encoder's may end it (EOS)."""
    tok = toks(model)
    for text in random_strings(1000 if thorough else 150, seed=2):
        data = text.encode()
        encoded = tuple(tok.encode(text))
        others = []
        for ids in itertools.islice(tok.oracle._tokenizations(data, False, ()), 400):
            if ids == encoded:
                continue
            pending, ok = EMPTY, True
            for t in ids:
                if not tok.filter.valid_next(pending, t):
                    ok = False
                    break
                pending = tok.filter.extend(pending, t)
            if ok and tok.filter.complete(pending):
                others.append(ids)
        assert not others, (text, others)


def pair_rule(tok, a, c):
    """The adjacent-pair rule judged in isolation (on bytes when they split a character)."""
    data = tok.oracle.vocab[a] + tok.oracle.vocab[c]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return tok.filter.pairs.merges_only([a, c])
    return tok.encode(text) == [a, c]


@pytest.mark.parametrize(
    "model, text",
    [
        ("tiny-gpt2", "a\n\nb"),  # '\n' | '\n' | 'b': the pair ('\n', '\n') alone merges
        ("tiny-gpt2", "😀's"),  # "'" joins the emoji's punctuation run, not "'s"
        ("tiny-llama3", "x  1"),  # ' ' | ' ' | '1': ('  ' would merge) alone
    ],
)
def test_the_pair_rule_rejects_canonical_tokenizations(toks, model, text):
    tok = toks(model)
    ids = tok.encode(text)
    assert not all(pair_rule(tok, a, c) for a, c in zip(ids, ids[1:], strict=False))
    pending = tok.pending(ids)
    assert tok.filter.complete(pending)


@pytest.mark.parametrize("model", MODELS)
def test_prefix_canonicality_matches_the_encoder(toks, model, thorough):
    """Random tokenizations of random strings, every prefix: filter == encoder search."""
    tok = toks(model)
    rng = random.Random(3)
    disagreements = []
    for text in random_strings(400 if thorough else 80, seed=4):
        ids = random_tokenization(tok, text.encode(), rng)
        pending = EMPTY
        for k in range(len(ids)):
            ours = tok.filter.valid_next(pending, ids[k])
            theirs = tok.oracle.canonical(tuple(ids[: k + 1]))
            if ours != theirs:
                disagreements.append((text, [tok.byte_vocab[i] for i in ids[: k + 1]], ours))
            if not ours:
                break
            pending = tok.filter.extend(pending, ids[k])
    assert not disagreements


@pytest.mark.parametrize("model", MODELS)
def test_mask_equals_one_token_answers(toks, model):
    tok = toks(model)
    rng = np.random.default_rng(5)
    for text in random_strings(6, seed=6):
        ids = tok.encode(text)
        pending = tok.pending(ids[: len(ids) // 2 + 1])
        mask = tok.filter.mask(pending)
        sample = rng.choice(tok.filter.n, 1500, replace=False)
        wrong = [int(t) for t in sample if bool(mask[t]) != tok.filter.valid_next(pending, t)]
        assert not wrong, (text, [tok.byte_vocab[t] for t in wrong[:5]])


@pytest.mark.parametrize("model", MODELS)
def test_kept_masks_are_read_only_and_equal_fresh_ones(toks, model, monkeypatch):
    """Masks are kept per pending state (reading ahead asks again): never stale or writable.

    A small cap makes the cache empty itself several times on the way.
    """
    from genlm_bytelm.exact.canonical import filter as filter_module

    monkeypatch.setattr(filter_module, "MASKS_KEPT", 3)
    tok = toks(model)
    pendings = []
    for text in random_strings(8, seed=9):
        ids = tok.encode(text)
        pendings += [tok.pending(ids[:k]) for k in range(1, min(len(ids), 4) + 1)]
    first = [tok.filter.mask(p) for p in pendings]
    again = [tok.filter.mask(p) for p in reversed(pendings)][::-1]
    for p, a, b in zip(pendings, first, again, strict=True):
        assert not a.flags.writeable and not b.flags.writeable
        fresh = tok.filter._mask(p, 0)  # computed anew, no cache
        assert np.array_equal(a, fresh) and np.array_equal(b, fresh), p
    with pytest.raises(ValueError, match="read-only"):
        first[0][0] = True
    assert len(tok.filter._masks) <= 3


@pytest.mark.parametrize("model", MODELS)
def test_bpe_pair_tests_equal_the_tokenizers_bpe(toks, model):
    """Pairs whose merges may cross (half of them invalid) against merges-only BPE.

    Both forms: the vector ``invalid_after(a)`` and the one-pair ``pair_invalid(a, c)``.
    """
    pairs = toks(model).filter.pairs
    rng = np.random.default_rng(7)
    derivable = np.flatnonzero(pairs.derivable)
    checked = invalid = 0
    for a in rng.choice(derivable, 150, replace=False).tolist():
        bad = pairs.invalid_after(a)
        yes = np.flatnonzero(bad & pairs.derivable)
        no = np.flatnonzero(~bad)
        cs = [*rng.choice(yes, min(40, len(yes)), replace=False), *rng.choice(no, 40)]
        pairs._cache.clear()  # pair_invalid answers from its spines, not the vector
        for c in map(int, cs):
            truth = pairs.merges_only([a, c])
            assert truth == (not bad[c]), (pairs.strings[a], pairs.strings[c])
            assert pairs.pair_invalid(a, c) == bool(bad[c]), (pairs.strings[a], pairs.strings[c])
            checked += 1
            invalid += not truth
    assert invalid > checked // 4


async def test_unsupported_tokenizers_are_named(asset_model_dir):
    spm = AutoTokenizer.from_pretrained(str(asset_model_dir("tiny-llama-spm")))
    # the byte-level filter refuses byte fallback (ExactByteState takes the SentencePiece one)
    with pytest.raises(CanonicalityUnsupportedError, match=r"tiny-llama-spm.*byte fallback"):
        CanonicalFilter(spm, [])
    with pytest.raises(CanonicalityUnsupportedError, match="ByteBeamState"):
        await ExactByteState.initial(MockAsyncLM(ByteTokenizer()))
