"""Pick how to turn a tokenizer's vocabulary into bytes, from what the tokenizer declares.

The order of evidence is in docs/architecture.md ("Decoding a vocabulary"); every result
is checked by [`check_round_trip`][genlm_core.tokenization.validation.check_round_trip].
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from genlm_core.errors import UnsupportedTokenizerError
from genlm_core.tokenization.byte_level import (
    byte_level_bytes,
    byte_table_from_decoder,
    gpt2_byte_table,
)
from genlm_core.tokenization.sentencepiece import META_SYMBOL, byte_piece_ids, sentencepiece_bytes
from genlm_core.tokenization.tiktoken_style import find_tiktoken_tables, tiktoken_bytes
from genlm_core.tokenization.validation import BatchDecoder, check_round_trip

__all__ = ["RawByteVocab", "describe_decoder", "read_byte_vocab", "tokenizer_name"]

_SUPPORTED = (
    "genlm-core decodes byte-level BPE vocabularies (ByteLevel decoder, GPT-2 byte "
    "alphabet), SentencePiece vocabularies with the 256 <0xXX> byte-fallback pieces, "
    "tiktoken-style byte vocabularies (mergeable_ranks), and slow tokenizers exposing "
    "sp_model or byte_decoder"
)


@dataclass
class RawByteVocab:
    """A decoded vocabulary before it becomes ``Token`` objects.

    Attributes:
        byte_strings: Bytes per token id; ``b""`` at holes.
        texts: The tokenizer's own string per id (what ``convert_ids_to_tokens`` gives),
            ``None`` at holes or where the tokenizer has no string form.
        added_ids: Ids of added/special tokens (their bytes are their text).
        holes: Ids below the largest id that no token uses.
        how: The strategy used, for messages.
    """

    byte_strings: list[bytes]
    texts: list[str | None]
    added_ids: frozenset[int]
    holes: list[int]
    how: str


def tokenizer_name(tokenizer: Any) -> str:
    """The tokenizer's ``name_or_path``, else its class name (for messages)."""
    return str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)


def _backend_of(tokenizer: Any) -> Any | None:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return backend
    try:
        from tokenizers import Tokenizer
    except ImportError:  # pragma: no cover - tokenizers ships with transformers
        return None
    return tokenizer if isinstance(tokenizer, Tokenizer) else None


def _decoder_json(backend: Any) -> dict[str, Any] | None:
    """The declared decoder as JSON (only the decoder: serializing the tokenizer is slow)."""
    decoder = backend.decoder
    if decoder is None:
        return None
    return json.loads(decoder.__getstate__())


def _kinds(node: Any, found: set[str] | None = None) -> set[str]:
    """Every component ``type`` in a decoder's JSON, nested sequences included."""
    found = set() if found is None else found
    if isinstance(node, dict):
        if isinstance(node.get("type"), str):
            found.add(node["type"])
        for value in node.values():
            _kinds(value, found)
    elif isinstance(node, list):
        for value in node:
            _kinds(value, found)
    return found


def describe_decoder(decoder: dict[str, Any] | None) -> str:
    """A short human description of a decoder's JSON, e.g. ``Sequence[Replace, ByteFallback]``."""
    if decoder is None:
        return "no decoder"
    kind = str(decoder.get("type"))
    if kind == "Sequence":
        parts = ", ".join(describe_decoder(d) for d in decoder.get("decoders", []))
        return f"Sequence[{parts}]"
    return kind


def _meta_symbol(decoder: dict[str, Any] | None) -> str | None:
    """The character a SentencePiece-style decoder turns into a space, if it has one."""
    if decoder is None:
        return None
    kind = decoder.get("type")
    if kind == "Metaspace":
        return str(decoder.get("replacement", META_SYMBOL))
    if kind == "Replace" and decoder.get("content") == " ":
        pattern = decoder.get("pattern", {}).get("String")
        return pattern if isinstance(pattern, str) and len(pattern) == 1 else None
    if kind == "Sequence":
        for part in decoder.get("decoders", []):
            found = _meta_symbol(part)
            if found is not None:
                return found
    return None


def _added_texts(tokenizer: Any, backend: Any | None) -> dict[int, str]:
    """Added tokens (special or not), id -> text, as the tokenizer reports them."""
    decoder = getattr(tokenizer, "added_tokens_decoder", None)
    if not isinstance(decoder, Mapping) and backend is not None:
        decoder = backend.get_added_tokens_decoder()
    if not isinstance(decoder, Mapping):
        return {}
    return {int(i): str(getattr(t, "content", t)) for i, t in decoder.items()}


def _layout(
    model_vocab: Mapping[str, int], added: Mapping[int, str]
) -> tuple[list[str], list[str | None], list[int]]:
    """Lay pieces out by id: ``(model_texts, texts, holes)``.

    ``model_texts`` (the byte conversion's input) has ``""`` at added ids and holes;
    ``texts``, the tokenizer's string per id, has added text, and ``None`` at holes.
    """
    max_model_id = max(model_vocab.values(), default=-1)
    size = max(max_model_id, max(added, default=-1)) + 1
    model_texts = [""] * size
    for piece, token_id in model_vocab.items():
        model_texts[token_id] = piece
    texts: list[str | None] = list(model_texts)
    for token_id, text in added.items():
        model_texts[token_id] = ""
        texts[token_id] = text
    if max_model_id + 1 == len(model_vocab):  # model ids are exactly 0..len-1 (ids are unique)
        holes = [i for i in range(len(model_vocab), size) if i not in added]
    else:
        covered = set(model_vocab.values()).union(added)
        holes = [i for i in range(size) if i not in covered]
    for i in holes:
        texts[i] = None
    return model_texts, texts, holes


def _checked(
    tokenizer: Any,
    raw: RawByteVocab,
    skip: frozenset[int],
    decode_batch: BatchDecoder | None,
    encode: Callable[[str], Sequence[int]] | None,
) -> RawByteVocab:
    """``raw`` once its bytes pass [`check_round_trip`][] (``skip``: ids not checked)."""
    name = tokenizer_name(tokenizer)
    check_round_trip(raw.byte_strings, skip, decode_batch, encode, tokenizer_name=name, how=raw.how)
    return raw


def _unsupported(tokenizer: Any, what: str) -> UnsupportedTokenizerError:
    return UnsupportedTokenizerError(
        # genlm-backend's words first: clients match them (genlm-control's tests do).
        f"Could not decode byte representation of the vocabulary of tokenizer "
        f"{tokenizer_name(tokenizer)!r} (exact byte strings are needed): {what}. "
        f"{_SUPPORTED}. Use a model whose tokenizer is one of these, or, if you know each "
        "token's exact bytes, pass (byte_vocab, str_vocab) to the model as byte_vocab=."
    )


def _from_fast(tokenizer: Any, backend: Any) -> RawByteVocab:
    decoder = _decoder_json(backend)
    kinds = _kinds(decoder)
    described = describe_decoder(decoder)
    model_type = type(backend.model).__name__
    meta = _meta_symbol(decoder)
    model_vocab = backend.get_vocab(with_added_tokens=False)
    added = _added_texts(tokenizer, backend)
    model_texts, texts, holes = _layout(model_vocab, added)

    if "ByteLevel" in kinds:
        how = f"decoder {described}: GPT-2 byte alphabet"
        byte_strings, unmapped = byte_level_bytes(model_texts, gpt2_byte_table())
        # Like tokenizers' ByteLevel decoder: a token with a character outside the
        # alphabet is emitted as its own UTF-8 text.
        for i in unmapped:
            byte_strings[i] = model_texts[i].encode()
    elif kinds & {"ByteFallback", "Metaspace"} or meta is not None:
        byte_pieces = byte_piece_ids(model_vocab)
        if len(set(byte_pieces.values())) < 256:
            raise _unsupported(
                tokenizer,
                f"its decoder is {described} and its {model_type} model has "
                f"{len(set(byte_pieces.values()))} of the 256 byte-fallback pieces "
                f"<0x00>..<0xFF>, so text outside its {len(model_vocab)} pieces becomes "
                "<unk> and some bytes cannot be spelled at all (a lossy SentencePiece "
                "model, trained without byte_fallback)",
            )
        meta = meta or META_SYMBOL
        how = f"decoder {described}: SentencePiece pieces, {meta!r} -> space, byte fallback"
        byte_strings = sentencepiece_bytes(model_texts, byte_pieces, meta)
        added = {i: t.replace(meta, " ") for i, t in added.items()}
    elif kinds:
        raise _unsupported(
            tokenizer,
            f"its decoder is {described} (model {model_type}), which is neither ByteLevel "
            "nor SentencePiece with byte fallback",
        )
    else:
        how = "no decoder declared: GPT-2 byte alphabet (guessed)"
        byte_strings, unmapped = byte_level_bytes(model_texts, gpt2_byte_table())
        if unmapped:
            examples = [model_texts[i] for i in unmapped[:5]]
            raise _unsupported(
                tokenizer,
                f"it declares no decoder (model {model_type}) and {len(unmapped)} tokens "
                f"are not in the GPT-2 byte alphabet, e.g. {examples!r}",
            )

    for token_id, text in added.items():
        byte_strings[token_id] = text.encode()
    skip = frozenset(added).union(holes)

    def decode_batch(batch: list[list[int]]) -> list[str]:
        return backend.decode_batch(batch, skip_special_tokens=False)

    def encode(text: str) -> list[int]:
        return backend.encode(text, add_special_tokens=False).ids

    raw = RawByteVocab(byte_strings, texts, frozenset(added), holes, how)
    # With no decoder, tokenizers joins tokens with spaces: only the encoding can be checked.
    return _checked(tokenizer, raw, skip, decode_batch if decoder is not None else None, encode)


def _from_sp_model(tokenizer: Any) -> RawByteVocab:
    sp = tokenizer.sp_model
    n_pieces = sp.get_piece_size()
    pieces = sp.id_to_piece(list(range(n_pieces)))
    added = _added_texts(tokenizer, None)
    model_vocab = {p: i for i, p in enumerate(pieces) if i not in added}
    model_texts, texts, holes = _layout(model_vocab, added)
    byte_pieces = byte_piece_ids(model_vocab)
    if len(set(byte_pieces.values())) < 256:
        raise _unsupported(
            tokenizer,
            f"its SentencePiece model (sp_model) has {len(set(byte_pieces.values()))} of the "
            f"256 byte-fallback pieces <0x00>..<0xFF>, so text outside its {n_pieces} "
            "pieces becomes <unk> (a lossy model, trained without byte_fallback)",
        )
    how = "slow tokenizer sp_model: SentencePiece pieces, byte fallback"
    byte_strings = sentencepiece_bytes(model_texts, byte_pieces)
    for token_id, text in added.items():
        byte_strings[token_id] = text.replace(META_SYMBOL, " ").encode()
    # Control pieces (<s>, </s>) decode to nothing and <unk> to " ⁇ ": not text.
    not_text = [i for i in range(n_pieces) if sp.IsControl(i) or sp.IsUnknown(i)]
    skip = frozenset(added).union(holes, not_text, range(n_pieces, len(byte_strings)))

    def decode_batch(batch: list[list[int]]) -> list[str]:
        return [sp.decode(ids) for ids in batch]

    raw = RawByteVocab(byte_strings, texts, frozenset(added), holes, how)
    return _checked(tokenizer, raw, skip, decode_batch, sp.encode)


def _from_vocab_and_table(tokenizer: Any, table: Any, how: str) -> RawByteVocab:
    """A slow byte-level tokenizer: ``get_vocab()`` strings through a byte table."""
    added = _added_texts(tokenizer, None)
    vocab = {p: i for p, i in tokenizer.get_vocab().items() if i not in added}
    model_texts, texts, holes = _layout(vocab, added)
    byte_strings, unmapped = byte_level_bytes(model_texts, table)
    if unmapped:
        examples = [model_texts[i] for i in unmapped[:5]]
        raise _unsupported(
            tokenizer,
            f"{how}, but {len(unmapped)} tokens have characters outside that byte "
            f"alphabet, e.g. {examples!r}",
        )
    for token_id, text in added.items():
        byte_strings[token_id] = text.encode()
    skip = frozenset(added).union(holes)

    def decode_batch(batch: list[list[int]]) -> list[str]:
        return [
            tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
            for ids in batch
        ]

    def encode(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False))

    raw = RawByteVocab(byte_strings, texts, frozenset(added), holes, how)
    return _checked(tokenizer, raw, skip, decode_batch, encode)


def _from_tiktoken(tokenizer: Any) -> RawByteVocab | None:
    tables = find_tiktoken_tables(tokenizer)
    if tables is None:
        return None
    byte_strings, texts, specials = tiktoken_bytes(tables)
    used = set(tables.ranks.values()).union(specials)
    holes = [i for i in range(len(byte_strings)) if i not in used]
    owner = tables.owner
    how = f"tiktoken-style mergeable_ranks of {type(owner).__name__}"
    raw = RawByteVocab(byte_strings, texts, frozenset(specials), holes, how)
    if not callable(getattr(owner, "decode_bytes", None)):
        return raw

    def decode_batch(batch: list[list[int]]) -> list[bytes]:
        return [owner.decode_bytes(ids) for ids in batch]

    skip = frozenset(specials).union(holes)
    return _checked(tokenizer, raw, skip, decode_batch, getattr(owner, "encode_ordinary", None))


def read_byte_vocab(tokenizer: Any) -> RawByteVocab:
    """Decode every token id of ``tokenizer`` to its bytes, choosing the strategy it declares.

    ``tokenizer``: a Hugging Face tokenizer (fast or slow), a ``tokenizers.Tokenizer`` or
    a tiktoken-style tokenizer.

    Raises:
        UnsupportedTokenizerError: The vocabulary cannot be decoded to exact bytes; the
            message names the decoder.
    """
    found = _from_tiktoken(tokenizer)
    if found is not None:
        return found
    backend = _backend_of(tokenizer)
    if backend is not None:
        return _from_fast(tokenizer, backend)
    if getattr(tokenizer, "sp_model", None) is not None:
        return _from_sp_model(tokenizer)
    byte_decoder = getattr(tokenizer, "byte_decoder", None)
    if isinstance(byte_decoder, Mapping) and byte_decoder:
        table = byte_table_from_decoder(byte_decoder)
        return _from_vocab_and_table(tokenizer, table, "slow tokenizer byte_decoder")
    if callable(getattr(tokenizer, "get_vocab", None)):
        return _from_vocab_and_table(
            tokenizer, gpt2_byte_table(), "no decoder exposed: GPT-2 byte alphabet (guessed)"
        )
    raise _unsupported(
        tokenizer,
        f"a {type(tokenizer).__name__} exposes no backend_tokenizer decoder, sp_model, "
        "byte_decoder, mergeable_ranks or get_vocab()",
    )
