"""``TokenByteTrie``: genlm-bytes 0.2.0's trie, on the flat arrays and numba kernels.

Weights by token id, atomic byte strings, an ``eos_node`` and ``TrieMode``, as
genlm-bytes (differences: docs/tries.md). ``TrieMode`` is the core's
([`genlm_core.trie.protocols`][]), re-exported here as genlm-bytes had it.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Hashable, Iterable, Sequence
from typing import Any

import numpy as np
import torch

from genlm_core.trie.base import FlatTrie
from genlm_core.trie.errors import InvalidVocabularyError, VocabularyTypeError
from genlm_core.trie.protocols import TrieMode
from genlm_core.trie.views import ChildrenView, PrefixView
from genlm_core.trie.vocab import is_token_type, warn_plain_bytes
from genlm_core.trie.weights import as_batch, as_vector, nan_error
from genlm_trie_numba import _kernels
from genlm_trie_numba._build import build_trie_arrays, plan_masses
from genlm_trie_numba._outputs import BatchOutputs
from genlm_trie_numba.cpu import resolve_device

__all__ = ["EOS", "TokenByteTrie", "TrieMode"]

EOS = 257  # the edge from the root to eos_node, as in genlm-bytes


class TokenByteTrie(FlatTrie):
    """Token weights (indexed by token id) -> masses of every byte prefix.

    Empty tokens count in the root's mass only, as in
    [`CharacterTrieBase`][genlm_core.trie.base.CharacterTrieBase] (and genlm-bytes).

    Args:
        decode: Tokens (``decode_vocab``); plain bytes are deprecated and numbered by
            position. Token ids must be ``0 .. len(decode) - 1``, each once.
        device: Where result tensors are put: ``None``/``"cpu"`` or ``"cuda"``. The
            computation runs on the CPU either way.
        atomic_byte_strings: Byte strings that are one edge instead of one per byte.
        eot_sentinel: First element of the leaf-edge keys ``(eot_sentinel, token_id)``.
        eos_byte_strings: Byte strings whose tokens are end-of-sequence tokens.
        max_batch_size: Kept for genlm-bytes compatibility (batches are not chunked
            on the CPU).

    Raises:
        InvalidVocabularyError: ``decode`` is empty, token ids are not a permutation
            of ``range(len(decode))``, or an atomic/EOS byte string is no token.
        VocabularyTypeError: An entry is neither a Token nor bytes.
    """

    out_dtype = np.float32
    _entries = "tokens"

    def __init__(
        self,
        decode: Sequence[Any],
        device: str | None = None,
        atomic_byte_strings: Iterable[bytes] | None = None,
        eot_sentinel: Any = None,
        eos_byte_strings: Iterable[bytes] | None = None,
        max_batch_size: int = 64,
    ) -> None:
        self.decode = self._tokens(decode)
        self.device = resolve_device(device, auto=False)
        self.eot_sentinel = eot_sentinel
        self.eos_byte_strings = set(eos_byte_strings or [])
        self.max_batch_size = max_batch_size
        n = len(self.decode)
        ids = np.fromiter((t.token_id for t in self.decode), dtype=np.int64, count=n)
        if not np.array_equal(np.sort(ids), np.arange(n)):
            raise InvalidVocabularyError(
                f"token ids must be 0..{n - 1}, each once (weights are indexed by token id); "
                f"got ids from {ids.min()} to {ids.max()} with {n - len(np.unique(ids))} "
                f"repeated. Use decode_vocab(tokenizer), whose ids are the positions."
            )
        self._ids = ids
        atomic = list(dict.fromkeys(atomic_byte_strings or []))
        codes, offsets, self._letters = _encode(self.decode, atomic)
        has_leaf = np.ones(n + 1, dtype=np.bool_)
        has_leaf[n] = False  # the EOS path: a node, no token
        self._arrays = build_trie_arrays(codes, offsets, has_leaf)
        plan = plan_masses(self._arrays)
        by_id = np.empty(n, dtype=np.int32)
        by_id[ids] = plan.token_src[:n]  # drop the leafless EOS word; index by token id
        self._plan = dataclasses.replace(plan, token_src=by_id)
        self._batch_outputs = BatchOutputs(self._arrays.num_nodes, self.out_dtype)
        self.root = self._arrays.root
        self.eos_node = self._node_of([EOS])
        for what, strings in (("Atomic", atomic), ("EOS", self.eos_byte_strings)):
            for bs in strings:
                if not self._positions_of(bs, atomic):
                    raise InvalidVocabularyError(
                        f"{what} byte string {bs!r} not in vocabulary: no token spells it"
                    )
        eos_positions = [p for bs in self.eos_byte_strings for p in self._positions_of(bs, atomic)]
        self.eos_token_ids = sorted(int(ids[p]) for p in eos_positions)

    def with_dtype(self, dtype: type) -> TokenByteTrie:
        """This trie with masses in ``dtype``, sharing its arrays (no second vocabulary scan)."""
        twin = copy.copy(self)
        twin.out_dtype = dtype
        twin._batch_outputs = BatchOutputs(self._arrays.num_nodes, dtype)
        return twin

    @staticmethod
    def _tokens(decode: Sequence[Any]) -> list[Any]:
        if not decode:
            raise InvalidVocabularyError("decode cannot be empty: pass the model's byte_vocab")
        types = set(map(type, decode))
        if all(is_token_type(t) for t in types):
            return list(decode)
        if types == {bytes}:
            from genlm_core.tokenization import Token

            warn_plain_bytes("TokenByteTrie")
            return [Token(i, b) for i, b in enumerate(decode)]
        bad = next(x for x in decode if not is_token_type(type(x)))
        raise VocabularyTypeError(
            f"decode must contain Token objects, got {type(bad).__name__} ({bad!r}); "
            f"use genlm_core.tokenization.decode_vocab(tokenizer) to get Tokens"
        )

    def _node_of(self, letters: list[Any]) -> int | None:
        node = self.root
        for letter in letters:
            node = self.children[node].get(letter)
            if node is None:
                return None
        return node

    def _positions_of(self, bs: bytes, atomic: list[bytes]) -> list[int]:
        node = self._node_of([bs] if bs in atomic else list(bs))
        if node is None:
            return []
        a = self._arrays
        kids = a.child_idx[a.child_ptr[node] : a.child_ptr[node + 1]]
        return [int(a.leaf_token[c]) for c in kids if a.leaf_token[c] >= 0]

    def weight_sum(self, ws: Any, mode: TrieMode | None = None) -> torch.Tensor:
        """Sum of the weights (one per token id) of the tokens below every node.

        ``mode`` is ``TrieMode.WITHOUT_EOS`` (default) or ``WITH_EOS``. Returns a
        float32 tensor of shape ``(num_nodes,)``.
        """
        return self.batch_weight_sum(as_vector(ws, len(self.decode), "weight_sum")[None], mode)[0]

    def batch_weight_sum(self, ws: Any, mode: TrieMode | None = None) -> torch.Tensor:
        """[`weight_sum`][] of a batch, shape ``(batch, len(decode))`` or a list of vectors.

        Returns a float32 tensor of shape ``(batch, num_nodes)``.
        """
        mode = mode or TrieMode.WITHOUT_EOS
        arr = as_batch(ws, len(self.decode), "weight_sum")
        eos = self.eos_token_ids if mode == TrieMode.WITH_EOS else []
        eos_mass = None
        if eos and arr.shape[0]:
            eos_mass = arr[:, eos].astype(np.float64).sum(axis=1)
            arr = arr.copy()
            arr[:, eos] = 0
        masses = self._fill("sum", arr, "batch_weight_sum")
        if eos_mass is not None:
            # Exact: both nodes' other masses are final; add the EOS mass once.
            for node in (self.eos_node, self.root):
                masses[:, node] = masses[:, node].astype(np.float64) + eos_mass
        return self._tensor(masses)

    def weight_max(self, ws: Any) -> torch.Tensor:
        """Max weight of the tokens below every node (-inf where there are none)."""
        return self.batch_weight_max(as_vector(ws, len(self.decode), "weight_max")[None])[0]

    def batch_weight_max(self, ws: Any) -> torch.Tensor:
        """[`weight_max`][] of a batch, as [`batch_weight_sum`][]."""
        arr = as_batch(ws, len(self.decode), "weight_max")
        return self._tensor(self._fill("max", arr, "batch_weight_max"))

    def _fill(self, op: str, arr: np.ndarray, what: str) -> np.ndarray:
        if arr.shape[0] == 0:
            return np.empty((0, self.num_nodes), dtype=self.out_dtype)
        out = self._batch_outputs.empty(arr.shape[0])
        masses, bad = _kernels.fill_batch(self._plan, op, arr, self.out_dtype, out)
        rows = np.flatnonzero(bad >= 0)
        if rows.size:
            row, token_id = int(rows[0]), int(bad[rows[0]])
            position = int(np.flatnonzero(self._ids == token_id)[0])
            raise nan_error(what, token_id, self.decode[position], row)
        return masses

    def _tensor(self, masses: np.ndarray) -> torch.Tensor:
        out = torch.from_numpy(masses)
        return out if self.device == "cpu" else out.to(self.device)

    @functools.cached_property
    def children(self) -> ChildrenView:
        """``children[node]``: edge -> child; a byte (int), atomic string, ``EOS`` or leaf key.

        A leaf's edge is keyed ``(eot_sentinel, token_id)``.
        """
        ids, sentinel = self._ids, self.eot_sentinel
        return ChildrenView(self._arrays, self._letter, lambda pos: (sentinel, int(ids[pos])))

    @functools.cached_property
    def node2prefix(self) -> PrefixView:
        """``node2prefix[node]``: the bytes (ints) from the root; atomic edges are spelled out."""

        def spell(code: int) -> list[Any]:
            letter = self._letter(code)
            return list(letter) if isinstance(letter, bytes) else [letter]

        return PrefixView(self._arrays, self._letter, spell)

    def _letter(self, code: int) -> Any:
        return code if code < 256 else self._letters[code - 256]

    @functools.cached_property
    def token_id_to_leaf(self) -> np.ndarray:
        """``(token_id, leaf)`` rows (int32), in ``decode`` order."""
        return np.stack(
            [self._ids.astype(np.int32), self._arrays.token_leaf[: len(self.decode)]], axis=1
        )

    @functools.cached_property
    def leaf2token_id(self) -> dict[int, int]:
        """Leaf node -> token id."""
        return {leaf: token_id for token_id, leaf in self.token_id_to_leaf.tolist()}

    @functools.cached_property
    def word2leaf(self) -> dict[Hashable, int]:
        """``(bytes, token_id)`` -> leaf."""
        leaves = self._arrays.token_leaf[: len(self.decode)].tolist()
        return {(bytes(t), t.token_id): leaf for t, leaf in zip(self.decode, leaves, strict=True)}

    @functools.cached_property
    def lookup(self) -> dict[Hashable, int]:
        """``(bytes, token_id)`` -> token id, as genlm-bytes."""
        return {(bytes(t), t.token_id): t.token_id for t in self.decode}


def _encode(
    tokens: list[Any], atomic: list[bytes]
) -> tuple[np.ndarray, np.ndarray, tuple[Any, ...]]:
    """Codes of every token (an atomic string is one code) plus a last word ``[EOS]``."""
    n = len(tokens)
    letters: tuple[Any, ...] = (EOS, *atomic)  # code 256 = EOS, 257 + j = atomic[j]
    atomic_code = {bs: 257 + j for j, bs in enumerate(atomic)}
    lengths = np.fromiter(map(len, tokens), dtype=np.int64, count=n)
    flat = np.frombuffer(b"".join(tokens), dtype=np.uint8).astype(np.int32)
    is_atomic = np.zeros(n, dtype=bool)
    if atomic_code:
        is_atomic = np.fromiter((bytes(t) in atomic_code for t in tokens), dtype=bool, count=n)
    new_lengths = np.where(is_atomic, 1, lengths)
    offsets = np.zeros(n + 2, dtype=np.int64)
    np.cumsum(np.append(new_lengths, 1), out=offsets[1:])
    codes = np.empty(int(offsets[-1]), dtype=np.int32)
    plain = ~is_atomic
    starts = offsets[:-2][plain]
    src = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=src[1:])
    keep = np.repeat(plain, lengths)
    codes[np.repeat(starts - src[:-1][plain], lengths[plain]) + np.flatnonzero(keep)] = flat[keep]
    for i in np.flatnonzero(is_atomic).tolist():
        codes[offsets[i]] = atomic_code[bytes(tokens[i])]
    codes[offsets[n]] = 256  # EOS
    return codes, offsets, letters
