"""Round-trip check: our byte strings must agree with the tokenizer's own decoder.

One probe text and a fixed sample of ids: cheap, deterministic, and enough to catch a
wrong byte alphabet, a missed meta symbol or a broken byte-fallback table.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Sequence

from genlm_core.errors import UnsupportedTokenizerError

__all__ = ["PROBE_TEXT", "check_round_trip"]

PROBE_TEXT = "Hello, world!\n\tTabs  and   spaces. ’•¶∂ƒ˙∆£Ħ爨ൠᅘ∰፨ naïve café 你好 🤗 <>{}\n\n"
_SAMPLE_DRAWS = 512  # ids drawn; those that are special or not valid UTF-8 on their own drop out
_SEQUENCE_LENGTH = 8
_SEED = 20240531
_ANCHOR_CANDIDATES = (b"a", b"e", b"A", b"x", b"0")

# Decodes a batch of id sequences the way the tokenizer does: to str, or to bytes
# (tiktoken's ``decode_bytes``), which allows an exact comparison.
BatchDecoder = Callable[[list[list[int]]], Sequence[str | bytes]]


def _anchor(byte_strings: Sequence[bytes], skip: Collection[int]) -> int | None:
    """An id spelling one ASCII character, put first so no decoder strips a leading space.

    SentencePiece decoders drop the space that starts the *decoded text* (the dummy
    prefix); with a letter in front, every other token's leading space survives.
    """
    for wanted in _ANCHOR_CANDIDATES:
        try:
            token_id = byte_strings.index(wanted)
        except ValueError:
            continue
        if token_id not in skip:
            return token_id
    return None


def _sample_sequences(byte_strings: Sequence[bytes], skip: Collection[int]) -> list[list[int]]:
    """Fixed pseudo-random id sequences whose bytes are valid UTF-8 token by token.

    Tokens holding part of a UTF-8 character are left to the probe text: decoders
    replace invalid sequences with U+FFFD in decoder-specific ways, so they cannot be
    compared exactly on their own.
    """
    rng = random.Random(_SEED)
    n = len(byte_strings)
    chosen = []
    for token_id in rng.sample(range(n), min(n, _SAMPLE_DRAWS)):
        data = byte_strings[token_id]
        if token_id in skip or not data:
            continue
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        chosen.append(token_id)
    return [chosen[i : i + _SEQUENCE_LENGTH] for i in range(0, len(chosen), _SEQUENCE_LENGTH)]


def _check_encoding(
    byte_strings: Sequence[bytes],
    skip: Collection[int],
    encode: Callable[[str], Sequence[int]],
    tokenizer_name: str,
    how: str,
) -> None:
    """Joining the bytes of the probe's encoding must give the probe back.

    A leading space is allowed: SentencePiece encoders prepend one (the dummy prefix).
    """
    ids = [i for i in encode(PROBE_TEXT) if i not in skip]
    ours = b"".join(byte_strings[i] for i in ids)
    expected = PROBE_TEXT.encode()
    if ours not in (expected, b" " + expected):
        raise UnsupportedTokenizerError(
            f"Could not decode byte representation of tokenizer {tokenizer_name!r}: the byte "
            f"strings decoded ({how}) do not round-trip: encoding {PROBE_TEXT!r} gives ids "
            f"{list(ids)} whose bytes join to {ours!r}. The tokenizer's vocabulary is not "
            "spelled the way this strategy assumes. Please report it with the tokenizer's "
            "name; meanwhile, if you know each token's exact bytes, pass (byte_vocab, "
            "str_vocab) to the model as byte_vocab=."
        )


def check_round_trip(
    byte_strings: Sequence[bytes],
    skip: Collection[int],
    decode_batch: BatchDecoder | None,
    encode: Callable[[str], Sequence[int]] | None,
    *,
    tokenizer_name: str,
    how: str,
) -> None:
    """Raise unless joining our byte strings reproduces the tokenizer's decoding.

    Args:
        byte_strings: Our bytes per token id.
        skip: Ids not to check (added/special tokens, holes): their bytes are their
            text by convention, and decoders may drop or alter them.
        decode_batch: The tokenizer's decoder over a batch of id sequences; ``None``
            when the tokenizer has no faithful decoder (a fast tokenizer declaring none
            joins tokens with spaces): then only the probe's encoding is checked.
        encode: The tokenizer's encoder (no special tokens), for the probe text.
        tokenizer_name: For the error message.
        how: How we decoded the vocabulary, for the error message.

    Raises:
        UnsupportedTokenizerError: A sequence decodes differently.
    """
    if decode_batch is None:
        if encode is not None:
            _check_encoding(byte_strings, skip, encode, tokenizer_name, how)
        return
    sequences = _sample_sequences(byte_strings, skip)
    if encode is not None:
        probe = [i for i in encode(PROBE_TEXT) if i not in skip]
        if probe:
            sequences.insert(0, probe)
    if not sequences:
        return
    anchor = _anchor(byte_strings, skip)
    prefix = [] if anchor is None else [anchor]
    decoded = decode_batch([prefix] + [prefix + s for s in sequences])
    head = decoded[0]
    for ids, got in zip(sequences, decoded[1:], strict=True):
        ours = b"".join(byte_strings[i] for i in ids)
        if isinstance(got, bytes):
            ok = got == head + ours
        else:
            text = ours.decode("utf-8", errors="replace")
            # Without an anchor, a SentencePiece decoder may drop our leading space.
            ok = got == head + text or (anchor is None and text[:1] == " " and got == text[1:])
        if not ok:
            raise UnsupportedTokenizerError(
                f"Could not decode byte representation of tokenizer {tokenizer_name!r}: the "
                f"byte strings decoded ({how}) do not round-trip: token ids {ids} join to "
                f"{ours!r}, but the tokenizer decodes them (after anchor {prefix}) to {got!r} "
                f"(anchor alone: {head!r}). The tokenizer's decoder does something this "
                "strategy does not model. Please report it with the tokenizer's name; "
                "meanwhile, if you know each token's exact bytes, pass (byte_vocab, "
                "str_vocab) to the model as byte_vocab=."
            )
