"""ExactByteState behind an NFC normalizer (Qwen3's real tokenizer) against brute force.

A tiny random-weight Qwen3 (built here from a config, seed fixed, float64, the
tokenizer's vocabulary size) and the oracle of tests/shared/byte_oracle.py, which asks
the tokenizer's own encoder (normalizer included) which token strings are canonical.
Strings with spaces at the start, runs of spaces, digits, punctuation, newlines,
multi-byte characters (some ending inside one) and combining marks: ``logp_next`` and
``logZ`` within 1e-6 wherever the oracle's probability exceeds 1e-6. Whole texts:
``log_likelihood(ends=True)`` equals the model's log-probability of the encoding
followed by EOS, scored directly.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from byte_oracle import ByteOracle
from torch_lm import Float64TorchLM
from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

from genlm_bytelm import ExactByteState, log_likelihood

TOLERANCE = 1e-6
#: Probabilities below this are not compared in log space (the issue's bar).
FLOOR = 1e-6

STRINGS = {
    "space-first-digits": b" 12.",
    "run-of-spaces": b"a   b",
    "newlines-punctuation": b"x,\n\ny",
    "inside-a-mark": b"e\xcc",  # e + an unfinished combining mark: some compose (not NFC)
    "mark-that-stays": "x\u0301".encode(),  # no precomposed x-acute: NFC
    "hangul-jamo": "\u1112".encode(),  # a leading jamo: a vowel after it would compose
    "utf8-inside": "中\xe9".encode()[:-1],  # ends inside a character
    "mark-after-a-composite": "\u1ea1\u0301".encode(),  # a-dot-below + acute: NFC
}
#: ``logp_next`` against the oracle costs 30-80 s a string on Qwen3's 151k tokens (the
#: oracle asks the encoder about every token after every tokenization): thorough only.
#: So is ``logZ`` of most (60-500 s: the oracle checks every token that starts with the
#: rest, e.g. tens of thousands after a space); by default, ``logZ`` of these (seconds):
DEFAULT = {"mark-that-stays"}


class CompletingOracle(ByteOracle):
    """The oracle, also completing a split character with a token that carries one more.

    Qwen3 writes ``"bﺈ다"`` as ``b | \\xef\\xba | \\x88다``: the only continuation after
    ``\\xef\\xba`` that keeps it canonical is such a token, which the shared oracle's
    fixed list of characters never tries (it would call those strings non-canonical).
    """

    def __init__(self, model, tokenizer):
        super().__init__(model, tokenizer)
        self._carrying = {1: [], 2: [], 3: []}  # continuation bytes + whole characters
        for i, b in enumerate(self.vocab):
            k = 0
            while k < min(3, len(b)) and 0x80 <= b[k] <= 0xBF:
                k += 1
            if 0 < k < len(b) and i not in self.special:
                try:
                    b[k:].decode("utf-8")
                except UnicodeDecodeError:
                    continue
                self._carrying[k].append(b)

    def _completed(self, context, last, text, partial):
        if super()._completed(context, last, text, partial):
            return True
        size = 2 if partial[0] < 0xE0 else 3 if partial[0] < 0xF0 else 4
        texts = []
        for b in self._carrying.get(size - len(partial), ()):
            try:
                texts.append(text + (partial + b).decode("utf-8"))
            except UnicodeDecodeError:
                continue
        want = [*context, last]
        for future in ("", " ", "a", "\\n"):
            encoded = self.encoder.encode_batch(
                [t + future for t in texts], add_special_tokens=False
            )
            if any(e.ids[: len(want)] == want for e in encoded):
                return True
        return False


class Loaded:
    def __init__(self, path):
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        torch.manual_seed(0)
        config = Qwen3Config(
            vocab_size=len(self.tokenizer),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=8,
            max_position_embeddings=64,
            tie_word_embeddings=True,
        )
        model = Qwen3ForCausalLM(config).to(torch.float64).eval()
        with torch.no_grad():  # spread the logits: tokenizations of distinct weights
            model.get_input_embeddings().weight.normal_(0, 1.0)
        self.lm = Float64TorchLM(model, self.tokenizer)
        self.oracle = CompletingOracle(model, self.tokenizer)
        self.eos_ids = [self.tokenizer.eos_token_id]
        self.eos = [bytes(self.lm.byte_vocab[i]) for i in self.eos_ids]


def assert_close(got, want):
    big = np.exp(want) > FLOOR
    assert np.all(np.exp(got[~big]) <= FLOOR + TOLERANCE), "mass where the oracle has none"
    worst = float(np.max(np.abs(got[big] - want[big])))
    assert worst < TOLERANCE, f"max |log p - oracle| = {worst:.3g}"


@pytest.fixture(scope="module")
def qwen(asset_tokenizer_dir):
    return Loaded(str(asset_tokenizer_dir("qwen3")))


@pytest.mark.parametrize("name", sorted(DEFAULT))
async def test_log_prefix_probabilities_equal_the_oracle(qwen, name):
    data = STRINGS[name]
    current = await ExactByteState.initial(qwen.lm, eos_byte_strings=qwen.eos)
    for k, b in enumerate(data, 1):
        current = await (current << b)
        want = qwen.oracle.log_prefix_prob(data[:k], True, qwen.eos_ids)
        assert current.logZ == pytest.approx(want, abs=TOLERANCE), data[:k]


@pytest.mark.thorough
@pytest.mark.parametrize("name", list(STRINGS))
async def test_next_byte_logprobs_equal_the_oracle(qwen, name):
    data = STRINGS[name]
    state = await ExactByteState.initial(qwen.lm, eos_byte_strings=qwen.eos)
    prefilled = await state.prefill(data)
    got = (await prefilled.logp_next()).ps
    assert_close(got, qwen.oracle.next_byte_logprobs(data, True, qwen.eos_ids))
    current = state
    for k, b in enumerate(data, 1):
        current = await (current << b)
        want = qwen.oracle.log_prefix_prob(data[:k], True, qwen.eos_ids)
        assert current.logZ == pytest.approx(want, abs=TOLERANCE), data[:k]
    assert prefilled.logZ == pytest.approx(current.logZ, abs=1e-9)


async def test_a_text_not_in_nfc_has_no_canonical_mass(qwen):
    """``e`` + U+0301 is ``é`` decomposed: no NFC text starts with these bytes."""
    state = await ExactByteState.initial(qwen.lm, eos_byte_strings=qwen.eos)
    after_e_mark = await (await state.prefill(b"e\xcc")).logp_next()
    assert after_e_mark.ps[0x81] == float("-inf")  # U+0301 composes with e
    assert after_e_mark.ps[0x85] > float("-inf")  # U+0345 does not (ypogegrammeni)


@pytest.mark.parametrize("text", ["Hello, wörld!", " e\u0301 x\u0301 中文 한국어  42\n"])
async def test_whole_text_likelihood_is_the_encoding_then_eos(qwen, text):
    ids = qwen.oracle.encoder.encode(text, add_special_tokens=False).ids
    data = b"".join(qwen.oracle.vocab[t] for t in ids)  # the bytes the encoding spells
    want = qwen.oracle.logp((*ids, *qwen.eos_ids))
    got = await log_likelihood(qwen.lm, data, ends=True, eos_byte_strings=qwen.eos)
    assert got.logprob == pytest.approx(want, abs=TOLERANCE)
