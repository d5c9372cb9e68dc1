"""SentencePiece-style BPE tokenizers (byte fallback, spaces as ``▁``), read for canonicality.

Three families (Llama-2, Mistral v0.1, Gemma 3: docs/bytes-design.md, *SentencePiece families*)
are recognised from ``tokenizer.json`` and checked on probe texts; each makes of a text
one BPE word, and the tokenizer's BPE model is the reference encoder.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from genlm_bytelm.errors import CanonicalityUnsupportedError
from genlm_bytelm.exact.canonical.spec import backend_tokenizer, tokenizer_name
from genlm_bytelm.exact.canonical.tokenizer_json import read_tokenizer_json

__all__ = ["SentencePieceSpec", "excluded_added", "is_sentencepiece", "read_sentencepiece_spec"]

SPACE = "\u2581"  # ▁
#: Texts on which the normalizer/pre-tokenizer emulation is checked when read.
_PROBES = ["", "a", " a", "a b", "  a  ", SPACE, SPACE + "x", " " + SPACE, "\n x", "x\n", "é 1"]


@dataclass(frozen=True)
class SentencePieceSpec:
    """A SentencePiece-style BPE tokenizer, as far as canonicality depends on it.

    ``family``: ``"prepend"`` (Llama-2), ``"metaspace"`` (Mistral) or ``"replace"`` (Gemma 3).
    """

    name: str
    vocab: dict[str, int]
    merges: list[tuple[str, str]]
    added_ids: frozenset[int]
    added: dict[int, str]
    dummy_prefix: bool
    family: str
    backend: Any

    def normalize(self, text: str) -> str:
        """The one BPE word the tokenizer makes of ``text`` (this module's emulation)."""
        out = text.replace(" ", SPACE)
        if text and self.family == "prepend":
            out = SPACE + out
        elif text and self.family == "metaspace" and not out.startswith(SPACE):
            out = SPACE + out
        return out


def is_sentencepiece(tokenizer: Any) -> bool:
    """Whether ``tokenizer`` is a BPE with byte fallback (handled by this module's filter)."""
    backend = backend_tokenizer(tokenizer)
    if backend is None:
        return False
    model = backend.model
    return type(model).__name__ == "BPE" and bool(getattr(model, "byte_fallback", False))


def read_sentencepiece_spec(tokenizer: Any) -> SentencePieceSpec:
    """Read and check a SentencePiece-style BPE tokenizer.

    Raises:
        CanonicalityUnsupportedError: Not one of the recognised families (the part named).
    """
    name = tokenizer_name(tokenizer)
    backend = backend_tokenizer(tokenizer)
    if backend is None:
        _unsupported(name, "it has no Hugging Face fast tokenizer (tokenizer.json) to read")
    config = read_tokenizer_json(tokenizer, backend)
    model = config.get("model") or {}
    if model.get("type") != "BPE" or not model.get("byte_fallback"):
        _unsupported(name, "its model is not a BPE with byte fallback")
    for key in ("dropout", "continuing_subword_prefix", "end_of_word_suffix", "ignore_merges"):
        if model.get(key):
            _unsupported(name, f"its BPE sets {key}={model[key]!r}")
    family = _family(name, config.get("normalizer"), config.get("pre_tokenizer"))
    _check_decoder(name, config.get("decoder"))
    if any(isinstance(m, str) for m in model["merges"]) and any(" " in p for p in model["vocab"]):
        _unsupported(name, "its merges are 'a b' strings and some piece holds a space")
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    spec = SentencePieceSpec(
        name=name,
        vocab=dict(model["vocab"]),
        merges=merges,  # type: ignore[arg-type]
        added_ids=frozenset(int(t["id"]) for t in config.get("added_tokens") or []),
        added={int(t["id"]): t["content"] for t in config.get("added_tokens") or []},
        dummy_prefix=family != "replace",
        family=family,
        backend=backend,
    )
    for text in _PROBES:
        words = _words(backend, text)
        if "".join(words) != spec.normalize(text) or len(words) > 1:
            _unsupported(name, f"its normalizer/pre-tokenizer makes {words} of {text!r}")
    return spec


def _words(backend: Any, text: str) -> list[str]:
    """The words the tokenizer's normalizer and pre-tokenizer make of ``text``."""
    normalized = backend.normalizer.normalize_str(text) if backend.normalizer else text
    if backend.pre_tokenizer is None:
        return [normalized]
    return [w for w, _ in backend.pre_tokenizer.pre_tokenize_str(normalized)]


def excluded_added(spec: SentencePieceSpec) -> frozenset[int]:
    r"""The added tokens never part of a canonical text; checks the others.

    Gemma 3's added ``\n``/``\t`` runs are pieces, checked to be cut as BPE cuts them; its
    ``▁`` runs match only a literal U+2581, which the byte-level LM cannot write.
    """
    model = spec.backend.model
    out, runs = set(), {}
    for i, content in spec.added.items():
        if [t.id for t in model.tokenize(content)] != [i]:
            out.add(i)
        elif set(content) == {SPACE}:
            continue  # matched only as literal U+2581 in raw text (see above)
        elif len(set(content)) == 1:
            runs.setdefault(content[0], {})[len(content)] = i
        else:
            _unsupported(spec.name, f"its added token {content!r} is also a BPE piece")
    for ch, by_length in runs.items():
        mixed = next((s for s in spec.vocab if ch in s and set(s) != {ch}), None)
        if mixed is not None:
            _unsupported(spec.name, f"added {ch!r} runs, but piece {mixed!r} mixes {ch!r}")
        longest = max(by_length)
        for k in range(1, 3 * longest + 2):
            chunks = [by_length.get(min(longest, k - j)) for j in range(0, k, longest)]
            if [t.id for t in model.tokenize(ch * k)] != chunks:
                _unsupported(spec.name, f"BPE cuts {k} x {ch!r} unlike its added tokens")
    return frozenset(out)


def _family(name: str, norm: Any, pre: Any) -> str:
    """Which recognised family the normalizer and pre-tokenizer make (or an error)."""
    replace = {"type": "Replace", "pattern": {"String": " "}, "content": SPACE}
    if norm == {
        "type": "Sequence",
        "normalizers": [{"type": "Prepend", "prepend": SPACE}, replace],
    }:
        if pre is None:
            return "prepend"
    elif norm is None and pre and pre.get("type") == "Metaspace":
        prepend = pre.get("prepend_scheme", "always" if pre.get("add_prefix_space") else "never")
        if pre.get("replacement") == SPACE and prepend in ("first", "always"):
            if pre.get("split") is False:
                return "metaspace"
    elif norm == replace:
        if pre is None or (pre.get("type") == "Split" and pre.get("pattern") == {"String": " "}):
            return "replace"
    _unsupported(name, f"its normalizer {norm} and pre-tokenizer {pre} are not a known family")
    raise AssertionError  # unreachable


def _check_decoder(name: str, decoder: Any) -> None:
    """The decoder must spell ``▁`` as a space and byte tokens as their byte."""
    steps = (decoder or {}).get("decoders") or []
    kinds = [s.get("type") for s in steps]
    if kinds[:3] != ["Replace", "ByteFallback", "Fuse"] or steps[0].get("content") != " ":
        _unsupported(name, f"its decoder {decoder} is not Replace(▁, ' '), ByteFallback, Fuse")


def _unsupported(name: str, why: str) -> None:
    raise CanonicalityUnsupportedError(
        f"ExactByteState cannot compute canonical tokenizations for {name}: {why}. It "
        f"covers byte-level BPE and the SentencePiece BPE families of Llama-2, Mistral "
        f"v0.1 and Gemma 3; use ByteBeamState, which sums over every tokenization."
    )
