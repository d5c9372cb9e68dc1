"""Read-ahead for ``ByteBeamState.prefill``: the model calls of a known text, batched.

The text's tokenization after the heaviest candidate is asked for in one prefix forward,
then its likely one-token detours in one batched call. It only warms the model's caches:
the beam then reads the bytes exactly as before. Long texts go window by window.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from genlm_bytelm.byte_lm.trie_state import eot_edges, trie_path
from genlm_core.errors import InvalidTokenIdsError

__all__ = ["WINDOW_BYTES", "canonical_tokens", "read_ahead"]

#: Bytes read ahead at once (the forward of one window keeps every position's logits).
WINDOW_BYTES = 512
#: Most detour contexts asked for per window, the likeliest first.
MAX_DETOURS = 64
#: A detour is asked for when its token's probability is at least this share of the
#: path's token's, times the beam's prune threshold (or this alone without one).
DETOUR_SLACK = 0.25
DETOUR_FLOOR = 1e-3


async def read_ahead(beam: Any, text: bytes) -> None:
    """Warm the model's caches with the calls ``beam`` will likely make reading ``text``."""
    if not beam.states or not text:
        return
    state = beam.states[0]  # the heaviest candidate
    lm_state = state.lm_state
    model = getattr(lm_state, "model", None)
    context = getattr(lm_state, "context", None)
    if model is None or not context or getattr(lm_state, "max_context_length", None):
        return
    trie = state.trie.trie
    spelled = bytes(state.partial) + text
    tokens = canonical_tokens(model, trie, spelled)
    if not tokens:
        return
    sequence = [*context, *tokens]
    try:
        rows = await _rows_along(model, sequence, start=len(context) - 1)
    except InvalidTokenIdsError:
        return  # past the model's context: the beam meets (and reports) it where it is
    lengths = [len(model.byte_vocab[t]) for t in tokens]
    detours = _likely_detours(trie, spelled, tokens, lengths, rows, beam.params.prune_threshold)
    if detours:
        n = len(context)
        await model.batch_next_token_logprobs([[*sequence[: n + j], t] for j, t in detours])


async def _rows_along(model: Any, sequence: list[int], start: int) -> torch.Tensor:
    prefix = getattr(model, "prefix_next_token_logprobs", None)
    if prefix is not None:
        return await prefix(sequence, start=start)
    return await model.batch_next_token_logprobs(
        [sequence[: i + 1] for i in range(start, len(sequence))]
    )


def _likely_detours(
    trie: Any,
    spelled: bytes,
    tokens: list[int],
    lengths: list[int],
    rows: torch.Tensor,
    prune_threshold: float,
) -> list[tuple[int, int]]:
    """``(boundary j, token)`` of the likely one-token detours from the path, likeliest first."""
    share = DETOUR_SLACK * prune_threshold if prune_threshold > 0 else DETOUR_FLOOR
    log_share = math.log(share)
    found: list[tuple[float, int, int]] = []
    position = 0
    for j, (token, length) in enumerate(zip(tokens, lengths, strict=True)):
        logps = rows[j]
        floor = logps[token].item() + log_share
        for other in _tokens_spelling_prefixes(trie, spelled, position):
            if other != token and (gap := logps[other].item()) > floor:
                found.append((gap - floor, j, other))
        position += length
    found.sort(reverse=True)
    return [(j, t) for _, j, t in found[:MAX_DETOURS]]


def _tokens_spelling_prefixes(trie: Any, spelled: bytes, position: int) -> list[int]:
    """Ids of the tokens whose bytes are a non-empty prefix of ``spelled[position:]``."""
    nodes = trie_path(trie, spelled[position:])
    return [token for node in nodes[1:] for _, token in eot_edges(trie, node)]


def canonical_tokens(model: Any, trie: Any, spelled: bytes) -> list[int]:
    """A tokenization spelling exactly ``spelled``, as the model's tokenizer would cut it.

    Where the tokenizer's tokens do not spell the bytes, greedy longest-first along the trie.
    """
    try:
        text, rest = spelled.decode("utf-8"), b""
    except UnicodeDecodeError as exc:
        text, rest = spelled[: exc.start].decode("utf-8"), spelled[exc.start :]
    tokens: list[int] = []
    if text:
        encode = getattr(getattr(model, "tokenizer", None), "encode", None)
        try:
            tokens = list(encode(text, add_special_tokens=False)) if encode else []
        except Exception:  # noqa: BLE001 - a tokenizer's failure only costs the read-ahead
            tokens = []
        vocab = model.byte_vocab
        if b"".join(bytes(vocab[t]) for t in tokens) != text.encode("utf-8"):
            tokens = _longest_first(trie, text.encode("utf-8"))
    return tokens + _longest_first(trie, rest)


def _longest_first(trie: Any, data: bytes) -> list[int]:
    """Greedy longest-match tokens spelling ``data`` (stops where no token matches)."""
    children = trie.children
    tokens: list[int] = []
    position = 0
    while position < len(data):
        node, best = trie.root, None
        for length, b in enumerate(data[position:], 1):
            node = children[node].get(b)
            if node is None:
                break
            if ends := eot_edges(trie, node):
                best = (length, ends[0][1])
        if best is None:
            break
        tokens.append(best[1])
        position += best[0]
    return tokens
