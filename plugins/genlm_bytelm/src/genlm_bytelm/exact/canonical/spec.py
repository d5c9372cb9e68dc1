"""What the exact byte-level LM must know of a byte-level BPE tokenizer, from ``tokenizer.json``.

Read from the tokenizer's own pieces, never guessed; what is not covered raises
[`CanonicalityUnsupportedError`][genlm_bytelm.errors.CanonicalityUnsupportedError] naming the part.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from genlm_bytelm.errors import CanonicalityUnsupportedError
from genlm_bytelm.exact.canonical.tokenizer_json import read_tokenizer_json

__all__ = ["GPT2_PATTERN", "TokenizerSpec", "backend_tokenizer", "read_spec"]

#: The regex of ``ByteLevel(use_regex=True)`` (the tokenizers library's GPT-2 pattern).
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


@dataclass(frozen=True)
class TokenizerSpec:
    """A byte-level BPE tokenizer, as far as canonicality depends on it.

    ``splits``: ``("regex", pattern)`` or ``("digits", individual_digits)`` steps;
    ``backend``: the ``tokenizers.Tokenizer``, the reference encoder.
    """

    name: str
    vocab: dict[str, int]
    merges: list[tuple[str, str]]
    ignore_merges: bool
    splits: tuple[tuple[str, Any], ...]
    added_ids: frozenset[int]
    backend: Any
    normalizer: str | None = None


def backend_tokenizer(tokenizer: Any) -> Any:
    """The ``tokenizers.Tokenizer`` behind a Hugging Face tokenizer (or None)."""
    for candidate in (tokenizer, getattr(tokenizer, "_tokenizer", None)):
        backend = getattr(candidate, "backend_tokenizer", None)
        if backend is not None and hasattr(backend, "to_str"):
            return backend
    if hasattr(tokenizer, "to_str") and hasattr(tokenizer, "pre_tokenizer"):
        return tokenizer  # already a tokenizers.Tokenizer
    return None


def tokenizer_name(tokenizer: Any) -> str:
    """A name for messages: the tokenizer's path or hub id, else its class."""
    name = getattr(tokenizer, "name_or_path", None)
    return f"{type(tokenizer).__name__}({name!r})" if name else type(tokenizer).__name__


def read_spec(tokenizer: Any) -> TokenizerSpec:
    """Read and check what canonicality needs from ``tokenizer``.

    Raises:
        CanonicalityUnsupportedError: Not a byte-level BPE tokenizer this module covers.
    """
    name = tokenizer_name(tokenizer)
    backend = backend_tokenizer(tokenizer)
    if backend is None:
        _unsupported(name, "it has no Hugging Face fast tokenizer (tokenizer.json) to read")
    config = read_tokenizer_json(tokenizer, backend)
    model = config.get("model") or {}
    if model.get("type") != "BPE":
        _unsupported(name, f"its model is {model.get('type')!r}, not byte-level BPE")
    if model.get("byte_fallback"):
        _unsupported(name, "it uses byte fallback (SentencePiece-style BPE)")
    if (
        model.get("dropout")
        or model.get("continuing_subword_prefix")
        or model.get("end_of_word_suffix")
    ):
        _unsupported(name, "its BPE has dropout or word prefixes/suffixes")
    normalizer = _normalizer(name, config.get("normalizer"))
    decoder = (config.get("decoder") or {}).get("type")
    if decoder != "ByteLevel":
        _unsupported(name, f"its decoder is {decoder!r}, not ByteLevel")
    splits = _splits(name, config.get("pre_tokenizer"))
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    added = frozenset(int(t["id"]) for t in config.get("added_tokens") or [])
    return TokenizerSpec(
        name=name,
        vocab=dict(model["vocab"]),
        merges=merges,  # type: ignore[arg-type]
        ignore_merges=bool(model.get("ignore_merges")),
        splits=splits,
        added_ids=added,
        backend=backend,
        normalizer=normalizer,
    )


def _normalizer(name: str, config: Any) -> str | None:
    """``"NFC"``, or None for no normalizer (or a ``Sequence`` of none); else an error."""
    if config is None:
        return None
    kind = config.get("type")
    if kind == "Sequence":
        found = {_normalizer(name, step) for step in config.get("normalizers") or []} - {None}
        if len(found) > 1:
            _unsupported(name, f"its normalizer sequence combines {sorted(found)}")
        return found.pop() if found else None
    if kind == "NFC":
        return "NFC"
    _unsupported(name, f"its normalizer ({kind}) rewrites text before tokenizing")
    return None


def _splits(name: str, pre: Any) -> tuple[tuple[str, Any], ...]:
    """The pre-tokenizer as regex/digit split steps, or an error naming what is not covered."""
    steps = pre.get("pretokenizers", []) if pre and pre.get("type") == "Sequence" else [pre]
    if not steps or steps[-1] is None or steps[-1].get("type") != "ByteLevel":
        _unsupported(name, f"its pre-tokenizer does not end with ByteLevel: {pre}")
    last = steps[-1]
    if last.get("add_prefix_space"):
        _unsupported(name, "its ByteLevel pre-tokenizer adds a prefix space")
    out: list[tuple[str, Any]] = []
    for step in steps[:-1]:
        kind = step.get("type")
        if kind == "Split":
            if step.get("behavior") != "Isolated" or step.get("invert"):
                _unsupported(name, f"its Split pre-tokenizer is not isolated/non-inverted: {step}")
            pattern = step.get("pattern") or {}
            if "Regex" in pattern:
                out.append(("regex", pattern["Regex"]))
            else:
                import regex

                out.append(("regex", regex.escape(pattern["String"])))
        elif kind == "Digits":
            out.append(("digits", bool(step.get("individual_digits"))))
        else:
            _unsupported(name, f"its pre-tokenizer has a {kind} step")
    if last.get("use_regex", True):
        out.append(("regex", GPT2_PATTERN))
    if not out:
        _unsupported(name, "its pre-tokenizer does not split text (no regex)")
    return tuple(out)


def _unsupported(name: str, why: str) -> None:
    raise CanonicalityUnsupportedError(
        f"ExactByteState cannot compute canonical tokenizations for {name}: {why}. It "
        f"covers byte-level BPE tokenizers (GPT-2, Llama-3, SmolLM2, ...); use "
        f"ByteBeamState, which sums over every tokenization, for this model."
    )
