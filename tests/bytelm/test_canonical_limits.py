"""The canonical filter's limits: exact past them, or an error when the filter is built.

Two synthetic byte-level BPE tokenizers (built with the ``tokenizers`` library) reach
what used to be hard limits of :class:`CanonicalFilter`:

* more than 64 pre-token structures after one pending text (a regex that cuts a run of
  ``x`` according to the ``y...z`` token after it) used to raise a bare
  ``OverflowError`` from ``mask`` during generation;
* a pre-token that must be followed more than three tokens ahead (``ignore_merges``
  with every ``a``/``b`` string of up to five letters an entry the merges never build,
  or every run of up to 100 ``a``) was silently rejected.

Both now agree with the tokenizer's own encoder; a tokenizer whose bound is too large
for the search (runs of up to 200 ``a``) raises ``CanonicalityUnsupportedError`` naming
it and the limit when the filter is built.
"""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
from byte_oracle import ByteOracle
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from genlm_bytelm import CanonicalityUnsupportedError
from genlm_bytelm.exact.canonical import EMPTY, CanonicalFilter
from genlm_core.tokenization import decode_vocab


def _byte_chars() -> list[str]:
    """GPT-2's byte alphabet: the vocabulary strings of the 256 bytes."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), 256)]
    cs, extra = list(bs), 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + extra)
            extra += 1
    return [chr(c) for c in cs]


def synthetic(name: str, pattern: str, entries: list[str], ignore_merges: bool) -> Filtered:
    """A byte-level BPE tokenizer with no merges, ``entries`` added to its 256 bytes."""
    vocab = {c: i for i, c in enumerate(_byte_chars())}
    for entry in entries:
        vocab.setdefault(entry, len(vocab))
    vocab["<|end|>"] = len(vocab)
    backend = Tokenizer(models.BPE(vocab, [], ignore_merges=ignore_merges))
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(["<|end|>"])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="<|end|>", name_or_path=name
    )
    return Filtered(tokenizer)


class Filtered:
    """A tokenizer, its filter, and its encoder as the reference."""

    def __init__(self, tokenizer: PreTrainedTokenizerFast) -> None:
        self.tokenizer = tokenizer
        self.byte_vocab = [bytes(t) for t in decode_vocab(tokenizer)[0]]
        self.filter = CanonicalFilter(tokenizer, self.byte_vocab)
        self.encoder = tokenizer.backend_tokenizer

    def encode(self, text: str) -> list[int]:
        return self.encoder.encode(text, add_special_tokens=False).ids

    def pending(self, ids: list[int]):
        p = EMPTY
        for t in ids:
            p = self.filter.extend(p, t)
        return p

    def canonical(self, ids: list[int], futures: list[str]) -> bool:
        """Whether the encoding of ``ids``' text plus one of ``futures`` starts with ``ids``."""
        text = b"".join(self.byte_vocab[t] for t in ids).decode()
        encoded = self.encoder.encode_batch([text + f for f in futures], add_special_tokens=False)
        return any(e.ids[: len(ids)] == list(ids) for e in encoded)


def _strings(alphabet: str, longest: int) -> list[str]:
    return ["".join(p) for n in range(longest + 1) for p in itertools.product(alphabet, repeat=n)]


# -- more than 64 structures ---------------------------------------------------------------

RUN = 66  # chunk lengths of the x-run: one structure each


@pytest.fixture(scope="module")
def structures():
    # a run of x is cut into single x's, except its last k when y^k z follows (and
    # kept whole before w): 66 cut patterns of the same pending run
    chunks = "|".join(f"x{{{k}}}(?=y{{{k}}}z)" for k in range(RUN, 1, -1))
    pattern = f"x+(?=w)|{chunks}|x|y+z?|."
    return synthetic("synthetic-structures", pattern, ["y" * k + "z" for k in range(1, 70)], False)


def test_a_table_may_have_more_than_64_structures(structures):
    """On main: OverflowError("more than 64 pre-token structures after 'xx...'") from mask."""
    tok = structures
    context = tok.encode("x" * 70)
    pending = tok.pending(context)
    mask = tok.filter.mask(pending)
    assert len(tok.filter.table(pending).structures) > 64
    one_by_one = np.array([tok.filter.valid_next(pending, t) for t in range(tok.filter.n)])
    assert (mask == one_by_one).all()
    truth = ByteOracle(None, tok.tokenizer).canonical_after(tuple(context), range(tok.filter.n))
    assert (mask == np.array(truth)).all(), np.flatnonzero(mask != np.array(truth))


def test_the_encoding_of_random_texts_is_accepted_past_64_structures(structures):
    tok = structures
    rng = random.Random(0)
    pieces = ["x" * 67, "x" * 3, "y" * 65 + "z", "yyz", "y", "z", "w", " ", "a"]
    for _ in range(20):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 5)))
        ids = tok.encode(text)
        pending = EMPTY
        for k, t in enumerate(ids):
            assert tok.filter.valid_next(pending, t), (text, k)
            last, pending = pending, tok.filter.extend(pending, t)
        assert tok.filter.mask(last)[ids[-1]], text
        assert tok.filter.complete(pending), text


# -- pre-tokens followed more than three tokens ahead ----------------------------------------

LONGEST = 5  # every a/b string of 2 to 5 letters is a vocabulary entry no merge builds


@pytest.fixture(scope="module")
def nested():
    entries = [s for s in _strings("ab", LONGEST) if len(s) >= 2]
    return synthetic("synthetic-nested", r"[ab]+|[^ab]+", entries, True)


def test_a_pre_token_followed_four_tokens_ahead_is_canonical(nested):
    """On main: [a, b] rejected, though the encoding of "abaaaa" is a|b|a|a|a|a."""
    tok = nested
    a, b = tok.encode("a")[0], tok.encode("b")[0]
    assert tok.encode("abaaaa")[:2] == [a, b]
    pending = tok.pending([a])
    assert tok.filter.valid_next(pending, b)
    assert tok.filter.mask(pending)[b]


def test_prefix_canonicality_matches_the_encoder_past_three_tokens(nested):
    """Random tokenizations of a/b texts: the filter equals a search over continuations."""
    tok = nested
    futures = [f + end for f in _strings("ab", LONGEST + 1) for end in ("", " ")]
    by_bytes = {
        v: i for i, v in enumerate(tok.byte_vocab) if v and i not in tok.filter.spec.added_ids
    }
    rng = random.Random(1)
    disagreements = []
    for _ in range(60):
        text = "".join(rng.choice("ab  ") for _ in range(rng.randint(1, 7)))
        data, ids = text.encode(), []
        while len(b"".join(tok.byte_vocab[t] for t in ids)) < len(data):
            pos = len(b"".join(tok.byte_vocab[t] for t in ids))
            options = [by_bytes.get(data[pos:e]) for e in range(pos + 1, len(data) + 1)]
            ids.append(rng.choice([t for t in options if t is not None]))
        pending = EMPTY
        for k, t in enumerate(ids):
            ours = tok.filter.valid_next(pending, t)
            theirs = tok.canonical(ids[: k + 1], futures)
            if ours != theirs:
                disagreements.append((text, ids[: k + 1], ours))
            if not ours:
                break
            pending = tok.filter.extend(pending, t)
    assert not disagreements


def runs(longest: int) -> Filtered:
    """Pre-tokens are runs of ``a``; ``a * 2`` to ``a * longest`` are entries no merge builds."""
    return synthetic(
        f"synthetic-runs-{longest}", r"a+|[^a]+", ["a" * k for k in range(2, longest + 1)], True
    )


def test_a_pre_token_followed_a_hundred_tokens_ahead_is_canonical():
    """On main: [a, a] rejected; "a" * 101 is encoded as 101 a's (no entry that long)."""
    tok = runs(100)
    a = tok.encode("a")[0]
    assert tok.encode("a" * 101) == [a] * 101
    assert tok.encode("a" * 100) == [tok.encoder.token_to_id("a" * 100)]
    pending = tok.pending([a])
    assert tok.filter.valid_next(pending, a)
    assert tok.filter.mask(pending)[a]
    assert not tok.filter.valid_next(pending, tok.encoder.token_to_id("aa"))  # a|aa: never
    assert tok.filter.complete(tok.pending([a] * 101))
    assert not tok.filter.complete(tok.pending([a] * 100))


def test_a_bound_too_deep_raises_when_the_filter_is_built():
    """On main: the filter builds, then rejects [a, a] (canonical: "a" * 201) in silence."""
    with pytest.raises(CanonicalityUnsupportedError) as error:
        runs(200)
    from genlm_bytelm.exact.canonical.limits import MAX_STRADDLE_DEPTH

    message = str(error.value)
    assert "synthetic-runs-200" in message
    assert f"limit of {MAX_STRADDLE_DEPTH}" in message
    assert "ByteBeamState" in message
