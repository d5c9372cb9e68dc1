"""Added tokens in ExactByteState, held to the tokenizer's own encoder (issue 39).

The tokenizer cuts its added tokens' contents out of a text before BPE (Qwen3's
``<think>``, Gemma 3's ``</div>`` and newline runs, DeepSeek-V4's ``<｜User｜>``), so an
added token is canonical exactly where that cut puts it. Special tokens are text here:
the encoder is asked with ``split_special_tokens=True``. Checked for Qwen3, Gemma 3,
DeepSeek-V4 and GPT-2 with added tokens of every flag the filter covers (``lstrip``,
``rstrip``, ``normalized``, one content inside another):

* the emulated cut equals the tokenizer's on random texts mixing contents;
* every prefix of the encoder's tokens is accepted, the mask agrees with the one-token
  answer, and as a whole text only the encoding is complete;
* prefix canonicality equals the encoder's continuation search on random tokenizations;
* whole texts: ``log_likelihood(ends=True)`` equals the encoding plus EOS scored directly;
* next-byte probabilities against brute-force enumeration (a tiny GPT-2 in float64).
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch
from byte_oracle import ByteOracle
from tokenizers import AddedToken
from torch_lm import Float64TorchLM
from transformers import AutoModelForCausalLM, AutoTokenizer

from genlm_bytelm import CanonicalityUnsupportedError, ExactByteState, log_likelihood
from genlm_bytelm.exact.canonical import EMPTY
from genlm_bytelm.exact.canonical.added import AddedTokensFilter
from genlm_bytelm.exact.canonical.select import canonical_filter
from genlm_core.testing import MockAsyncLM
from genlm_core.tokenization import decode_vocab

FAMILIES = ["qwen3", "gemma3", "deepseek-v4", "gpt2-added"]

#: Added to GPT-2's tokenizer: every flag the filter covers, and overlapping contents.
GPT2_ADDED = [
    AddedToken("<think>", special=False, normalized=False),
    AddedToken("</think>", special=False, normalized=False),
    AddedToken("<t>", special=False, normalized=False),
    AddedToken("x<t>yz", special=False, normalized=False),  # starts before another
    AddedToken("<mask>", lstrip=True, special=False, normalized=False),
    AddedToken("[R]", rstrip=True, special=False, normalized=False),
    AddedToken("ab", special=False, normalized=True),  # second pass; also a BPE piece
    AddedToken("\n\n\n", special=False, normalized=False),
]
#: Contents that are special (text to the exact state) in each family.
SPECIALS = {
    "qwen3": ["<|im_end|>", "<|endoftext|>"],
    "gemma3": ["<eos>", "<start_of_turn>"],
    "deepseek-v4": ["<｜end▁of▁sentence｜>"],
    "gpt2-added": ["<|endoftext|>"],
}
PLAIN = ["a", "b", " ", "x", "th", "ink", "<", ">", "/", "|", "\n", "é", "中", "1", "  ", "z"]
#: Continuations the encoder search tries after a token string's text.
FUTURES = ["", " ", "a", "x", "1", ".", "\n", "<", ">", "é", "中", "\t", " a", "a ", "zz", "/"]


def load_tokenizer(name, **kwargs):
    from genlm_assets import tokenizer_dir

    if name == "gpt2-added":
        tok = AutoTokenizer.from_pretrained(tokenizer_dir("gpt2-npm"), **kwargs)
        tok.add_tokens(GPT2_ADDED)
        return tok
    return AutoTokenizer.from_pretrained(tokenizer_dir(name), **kwargs)


class Family:
    def __init__(self, name):
        self.name = name
        self.tokenizer = load_tokenizer(name)
        self.encoder = load_tokenizer(name, split_special_tokens=True).backend_tokenizer
        self.byte_vocab = decode_vocab(self.tokenizer)[0]
        self.bytes = [bytes(t) for t in self.byte_vocab]
        self.filter = canonical_filter(self.tokenizer, self.byte_vocab)
        assert isinstance(self.filter, AddedTokensFilter)
        decoder = self.tokenizer.added_tokens_decoder
        self.added = {i for i, t in decoder.items() if not t.special and i in self.filter.added}
        rng = random.Random(0)
        contents = sorted(decoder[i].content for i in self.added)
        picked = rng.sample(contents, min(12, len(contents)))
        if name == "gemma3":
            picked += ["</div>", "<table>", "\n", "\n\n", "\t", "<h1>"]
        if name in ("qwen3", "deepseek-v4"):
            picked += ["<think>", "</think>"]
        self.contents = picked
        prefixes = [c[:k] for c in picked for k in range(1, len(c))]
        self.alphabet = PLAIN + picked + SPECIALS[name] + rng.sample(prefixes, 10)

    def encode(self, text):
        return self.encoder.encode(text, add_special_tokens=False).ids

    def texts(self, n, seed):
        rng = random.Random(seed)
        return ["".join(rng.choices(self.alphabet, k=rng.randint(1, 7))) for _ in range(n)]

    def walk(self, ids):
        """The filter's state after ``ids``, or None where it rejects one."""
        state = EMPTY
        for t in ids:
            if not self.filter.valid_next(state, t):
                return None
            state = self.filter.extend(state, t)
        return state

    def canonical(self, ids):
        """The encoder's answer: some continuation's encoding starts with ``ids``."""
        data = b"".join(self.bytes[t] for t in ids)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return None  # ends inside a character: not asked here
        want = list(ids)
        encoded = self.encoder.encode_batch([text + f for f in FUTURES], add_special_tokens=False)
        return any(e.ids[: len(want)] == want for e in encoded)

    def tokenization(self, data, rng):
        """A random token string spelling ``data`` (added tokens and plain spellings alike)."""
        out, pos = [], 0
        while pos < len(data):
            options = [
                t
                for k in range(1, min(len(data) - pos, 24) + 1)
                for t in self.by_bytes.get(data[pos : pos + k], ())
            ]
            t = rng.choice(options)
            out.append(t)
            pos += len(self.bytes[t])
        return out

    @property
    def by_bytes(self):
        if not hasattr(self, "_by_bytes"):
            specials = {i for i, t in self.tokenizer.added_tokens_decoder.items() if t.special}
            self._by_bytes = {}
            for i, b in enumerate(self.bytes):
                if b and i not in specials:
                    self._by_bytes.setdefault(b, []).append(i)
        return self._by_bytes


@pytest.fixture(scope="module")
def families():
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = Family(name)
        return cache[name]

    return get


@pytest.mark.parametrize("name", FAMILIES)
def test_the_emulated_cut_is_the_tokenizers(families, name, thorough):
    fam = families(name)
    for text in fam.texts(3000 if thorough else 300, seed=1):
        enc = fam.encoder.encode(text, add_special_tokens=False)
        data = text.encode()
        want = []
        for i, (s, e) in zip(enc.ids, enc.offsets, strict=True):
            if i in fam.added:
                start, end = len(text[:s].encode()), len(text[:e].encode())
                if data[start:end] == fam.bytes[i]:  # lstrip/rstrip spans hold the space
                    want.append((start, end, i))
                else:
                    stripped = data[start:end].strip()
                    offset = data[start:end].index(stripped)
                    want.append((start + offset, start + offset + len(stripped), i))
        assert fam.filter.split.cuts(data) == want or _stripped(fam, text), text


def _stripped(fam, text):
    """Whether whitespace next to an lstrip/rstrip token was absorbed (spans differ there)."""
    return any(fam.filter.added[i].lstrip or fam.filter.added[i].rstrip for i in fam.added) and (
        " " in text or "\n" in text
    )


@pytest.mark.parametrize("name", FAMILIES)
def test_every_encoding_is_accepted_and_complete(families, name, thorough):
    fam = families(name)
    rng = np.random.default_rng(2)
    added = np.asarray(sorted(fam.filter.added), dtype=np.int64)
    for n, text in enumerate(fam.texts(1500 if thorough else 150, seed=2)):
        ids = fam.encode(text)
        state = EMPTY
        for k, t in enumerate(ids):
            assert fam.filter.valid_next(state, t), (text, ids[: k + 1])
            mask = fam.filter.mask(state)
            assert mask[t], (text, ids[: k + 1])
            if n % 10 == 0:  # the mask is the one-token answer (added tokens, then a sample)
                sample = np.concatenate([added[:300], rng.choice(fam.filter.n, 300)])
                wrong = [int(d) for d in sample if mask[d] != fam.filter.valid_next(state, d)]
                assert not wrong, (text, ids[:k], [fam.bytes[d] for d in wrong[:5]])
            state = fam.filter.extend(state, t)
        assert fam.filter.complete(state), text


@pytest.mark.parametrize("name", FAMILIES)
def test_as_whole_texts_only_the_encoding_is_complete(families, name, thorough):
    fam = families(name)
    rng = random.Random(3)
    for text in fam.texts(600 if thorough else 80, seed=3):
        encoded = fam.encode(text)
        for _ in range(12):
            ids = fam.tokenization(text.encode(), rng)
            if ids == encoded:
                continue
            state = fam.walk(ids)
            assert state is None or not fam.filter.complete(state), (text, ids, encoded)


@pytest.mark.parametrize("name", FAMILIES)
def test_prefix_canonicality_matches_the_encoder(families, name, thorough):
    """Random tokenizations of random texts, every prefix: the filter == the encoder search."""
    fam = families(name)
    rng = random.Random(4)
    disagreements, rejected = [], 0
    for text in fam.texts(500 if thorough else 60, seed=4):
        ids = fam.tokenization(text.encode(), rng)
        state = EMPTY
        for k in range(len(ids)):
            ours = fam.filter.valid_next(state, ids[k])
            theirs = fam.canonical(ids[: k + 1])
            if theirs is not None and ours != theirs:
                disagreements.append((text, [fam.bytes[i] for i in ids[: k + 1]], ours))
            if not ours:
                rejected += 1
                break
            state = fam.filter.extend(state, ids[k])
    assert not disagreements
    assert rejected > 10  # the random tokenizations do reach non-canonical strings


def _ids(fam, *pieces):
    """Token ids of byte strings that are single tokens (added or plain)."""
    out = []
    for piece in pieces:
        data = piece.encode() if isinstance(piece, str) else piece
        candidates = fam.by_bytes[data]
        added = [t for t in candidates if t in fam.added]
        out.append(added[0] if added and not isinstance(piece, bytes) else candidates[-1])
    return out


def test_the_cut_decides_qwen3s_think(families):
    fam = families("qwen3")
    think = _ids(fam, "<think>")[0]
    plain = [t for t in fam.encode("<thinkx")[:-1]]  # "<think" spelled plainly
    assert fam.walk([*plain, *fam.encode("x")])  # "<thinkx" is text
    gt = fam.by_bytes[b">"][0]
    assert fam.walk(plain) is not None  # a prefix that could still become one: pending
    assert not fam.filter.valid_next(fam.walk(plain), gt)  # "<think>" spelled plainly
    assert fam.walk([*fam.encode("<th"), think])  # "<th<think>": a content after text
    assert fam.walk([think, think])  # adjacent ones
    assert fam.walk([*fam.encode("a "), think])  # one after a space
    assert fam.walk([*fam.encode("ab"), think, *fam.encode("cd")])  # inside a word


def test_gemmas_newline_runs_are_cut_longest_first(families):
    fam = families("gemma3")
    nl, nl2 = _ids(fam, "\n", "\n\n")
    assert fam.walk([nl2]) and fam.walk([nl, *fam.encode("a"), nl])
    assert fam.walk([nl, nl]) is None  # the cut takes "\n\n" whole
    run31 = _ids(fam, "\n" * 31)[0]
    assert fam.encode("\n" * 32) == [run31, nl]
    assert fam.walk([run31, nl]) and fam.walk([run31, nl2]) is not None
    div = _ids(fam, "</div>")[0]
    assert fam.walk([*fam.encode("x"), div, nl])
    assert fam.walk(fam.encode("</div") + fam.encode(">")) is None  # "</div>" spelled plainly


def test_gpt2_flags_and_overlaps(families):
    fam = families("gpt2-added")
    mask, R, t, xtyz = _ids(fam, "<mask>", "[R]", "<t>", "x<t>yz")
    space = fam.by_bytes[b" "][0]
    assert fam.walk([*fam.encode("a"), mask]) and fam.walk([*fam.encode("a"), space, mask]) is None
    assert fam.walk([R, *fam.encode("x")]) and fam.walk([R, space]) is None
    x, y, z = (fam.by_bytes[c][0] for c in (b"x", b"y", b"z"))
    assert fam.walk([xtyz]) and fam.walk([x, t, y])
    assert fam.walk([x, t, y, z]) is None  # "x<t>yz" is one added token
    assert fam.walk(fam.encode("cab")) and fam.encode("cab")[-1] in fam.added  # second pass


@pytest.mark.parametrize("name", ["qwen3", "gemma3", "deepseek-v4", "gpt2-added"])
async def test_whole_texts_equal_the_encoding_plus_eos(families, name):
    """The issue's bar: within 1e-3 (measured: float64 round-off)."""
    fam = families(name)
    llm = MockAsyncLM(fam.tokenizer)
    try:
        # DeepSeek-V4's tokenizer names no BOS/EOS: its begin/end of sentence, 0 and 1
        start = [0] if name == "deepseek-v4" else None
        eos_id = 1 if name == "deepseek-v4" else fam.tokenizer.eos_token_id
        eos = [fam.bytes[eos_id]]
        texts = [
            "Let me think.<think>The user asks x.</think>\n\nAnswer: 42",
            '<div class="a"><table><tr><td>1</td></tr></table></div>\n\n\n<h1>T</h1>',
            "x<｜User｜>hi<｜Assistant｜><think>\n</think>ok<｜tr｜>",
            "<|im_end|> is text; <thi and </think > too <think>",
            "a <mask> [R]  b x<t>yz x<t>y cab\n\n\n\n",
        ]
        for text in texts:
            ids = fam.encode(text)
            data = b"".join(fam.bytes[t] for t in ids)  # lstrip/rstrip drop spaces
            context = start or [fam.tokenizer.bos_token_id or fam.tokenizer.eos_token_id]
            want, seq = 0.0, list(context)
            for t in [*ids, eos_id]:
                row = await llm.next_token_logprobs(seq)
                want += float(row[t])
                seq.append(t)
            state = await ExactByteState.initial(llm, eos_byte_strings=eos, initial_context=start)
            got = (await (await state.prefill(data)).__lshift__(257)).logZ
            assert got == pytest.approx(want, abs=1e-3), (text, got, want)
            if start is None:
                ll = await log_likelihood(llm, data, eos_byte_strings=eos, ends=True)
                assert ll.logprob == pytest.approx(want, abs=1e-3)
    finally:
        llm.cleanup()


class AddedOracle(ByteOracle):
    """The brute-force oracle, with only special tokens never parsed from text."""

    def __init__(self, model, tokenizer):
        super().__init__(model, tokenizer)
        self.special = {i for i, t in tokenizer.added_tokens_decoder.items() if t.special}


@pytest.fixture(scope="module")
def tiny_added(asset_model_dir):
    path = str(asset_model_dir("tiny-gpt2"))
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.add_tokens(GPT2_ADDED)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float64).eval()
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    with torch.no_grad():
        model.get_input_embeddings().weight[-len(GPT2_ADDED) :].normal_(0, 1.0)
    return Float64TorchLM(model, tokenizer), AddedOracle(model, tokenizer)


@pytest.mark.parametrize(
    "data",
    [
        b"x<t>y",
        b"[R]x",
        pytest.param(b"a<t>", marks=pytest.mark.thorough),
        pytest.param(b"<think>a", marks=pytest.mark.thorough),
        pytest.param(b"c<ma", marks=pytest.mark.thorough),
        pytest.param(b" ab", marks=pytest.mark.thorough),
    ],
)
async def test_next_byte_probabilities_equal_brute_force(tiny_added, data):
    lm, oracle = tiny_added
    eos = [bytes(lm.byte_vocab[lm.tokenizer.eos_token_id])]
    state = await (await ExactByteState.initial(lm, eos_byte_strings=eos)).prefill(data)
    got = np.asarray((await state.logp_next()).ps)
    want = oracle.next_byte_logprobs(data, canonical=True, eos_ids=[lm.tokenizer.eos_token_id])
    big = np.exp(want) > 1e-6
    assert np.all(np.exp(got[~big]) <= 2e-6)
    assert float(np.max(np.abs(got[big] - want[big]))) < 1e-6
    assert state.logZ == pytest.approx(
        oracle.log_prefix_prob(data, canonical=True, eos_ids=[lm.tokenizer.eos_token_id]),
        abs=1e-6,
    )
    assert math.isfinite(state.logZ)


def test_single_word_tokens_are_refused_by_name():
    tok = load_tokenizer("gpt2-added")
    tok.add_tokens([AddedToken("<w>", single_word=True, special=False, normalized=False)])
    with pytest.raises(CanonicalityUnsupportedError, match="single_word"):
        canonical_filter(tok, decode_vocab(tok)[0])


#: Texts mixing added tokens with prose, code and UTF-8, long enough for settled runs.
RUN_TEXTS = [
    "The user asks why.<think>First, the river town grew around a bridge built in 1234; "
    "its market drew traders.</think>\n\nAnswer: because of the toll (3.5%). <tool_call>"
    '{"name": "f", "x": 1}</tool_call> and <thi and </think > are text. ',
    '<div class="row"><table><tr><td>1</td><td>Item 2</td></tr></table></div>\n\n\n'
    "<h1>Title</h1>\n<p>Die Brücke — Москва — 東京</p>\n\t<unused0> x<｜User｜>y ",
    "x<t>yz and x<t>y and cab<mask>[R]z and <think>a</think>\n\n\n\n b ",
]


@pytest.mark.parametrize("name", FAMILIES)
async def test_settled_runs_across_added_tokens_equal_byte_by_byte(families, name):
    """The prefill's settled runs go through cuts: the same candidates and weights."""
    from genlm_bytelm.exact import prefill as exact_prefill

    fam = families(name)
    llm = MockAsyncLM(fam.tokenizer, temperature=0.3)
    start = [0] if name == "deepseek-v4" else None
    try:
        for text in RUN_TEXTS:
            data = b"".join(fam.bytes[t] for t in fam.encode(text * 3))
            states = []
            for runs in (True, False):
                old = exact_prefill.SETTLED_RUNS
                exact_prefill.SETTLED_RUNS = runs
                try:
                    state = await ExactByteState.initial(llm, initial_context=start)
                    states.append(await state.prefill(data))
                finally:
                    exact_prefill.SETTLED_RUNS = old
            fast, slow = states
            got = sorted((tuple(s.lm_state.context), bytes(s.partial), s.weight) for s in fast)
            want = sorted((tuple(s.lm_state.context), bytes(s.partial), s.weight) for s in slow)
            assert [g[:2] for g in got] == [w[:2] for w in want], text
            np.testing.assert_allclose([g[2] for g in got], [w[2] for w in want], atol=1e-9)
            assert math.isfinite(fast.logZ)
    finally:
        llm.cleanup()
