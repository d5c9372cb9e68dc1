"""What every character trie of this package shares: structure, views, checks.

Subclasses build the flat arrays (``_build``) and fill masses (``_fill``); this class
gives genlm-backend's API on top.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Sequence
from typing import Any, ClassVar

import numpy as np

from genlm_core.trie.arrays import TrieArrays
from genlm_core.trie.errors import InvalidVocabularyError
from genlm_core.trie.views import ChildrenView, PrefixView
from genlm_core.trie.vocab import OTHER, PLAIN_BYTES, TOKEN, EncodedVocab, encode_vocab, word_key
from genlm_core.trie.weights import as_batch, as_vector, nan_error

__all__ = ["CharacterTrieBase", "FlatTrie"]


class FlatTrie:
    """What every trie on [`TrieArrays`][] shares (genlm-trie-numba's byte trie too)."""

    decode: Sequence[Any]
    word2leaf: dict[Hashable, int]
    _arrays: TrieArrays
    #: What ``repr`` calls the entries of ``decode``.
    _entries: ClassVar[str] = "entries"

    @property
    def num_nodes(self) -> int:
        """Number of nodes, leaves (and a byte trie's ``eos_node``) included."""
        return self._arrays.num_nodes

    @functools.cached_property
    def leaf2word(self) -> dict[int, Hashable]:
        """Leaf -> word key (the inverse of ``word2leaf``)."""
        return {leaf: word for word, leaf in self.word2leaf.items()}

    def visualize(self, ws: Any = None) -> Any:
        """A ``graphviz.Digraph`` of the trie, showing node values ``ws`` if given.

        ``ws`` is node-indexed, e.g. ``weight_sum``'s result. Needs ``pip install graphviz``.
        """
        from genlm_core.trie.visualize import visualize

        return visualize(self, ws)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self.decode)} {self._entries}, {self.num_nodes} nodes)"


class CharacterTrieBase(FlatTrie):
    """A trie over a vocabulary; node ``v``'s mass aggregates the tokens below ``v``.

    A token is below every node whose prefix its bytes start with, so the mass of a
    prefix is the weight of the tokens that spell it out (or more). An empty token
    (``Token(i, b"")``: the id-range holes and logits padding of ``decode_vocab``)
    starts with the empty prefix only: its leaf hangs directly below the root, and its
    weight counts in the root's mass and in no byte's. As in genlm-backend; give holes
    weight 0 (``-inf`` in log space) if the root's mass must equal its byte children's.

    Args:
        decode: The vocabulary: entry ``i`` gets weight ``ws[i]``. Tokens
            (``genlm_core.tokenization.Token`` or genlm-backend's), plain ``bytes``
            (deprecated) or other iterables of hashable letters (e.g. an EOS marker).
            Entries with equal bytes get a leaf each.

    Raises:
        InvalidVocabularyError: An entry is not iterable, or two entries have the
            same ``word2leaf`` key (the same Token twice, equal plain bytes, ...).
    """

    #: dtype of the returned masses.
    out_dtype: ClassVar[type] = np.float64

    def __init__(self, decode: Sequence[Any]) -> None:
        self.decode = decode
        self._vocab: EncodedVocab = encode_vocab(decode, owner=type(self).__name__)
        self._arrays: TrieArrays = self._build(self._vocab)
        self._check_duplicates()
        self.root: int = self._arrays.root

    def _build(self, vocab: EncodedVocab) -> TrieArrays:
        raise NotImplementedError

    def _fill(self, op: str, ws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Masses ``(B, N)`` of every row of ``ws`` (B, V), and each row's first NaN or -1."""
        raise NotImplementedError

    def _fill_one(self, op: str, ws: np.ndarray) -> tuple[np.ndarray, int]:
        masses, bad = self._fill(op, ws[None, :])
        return masses[0], int(bad[0])

    def weight_sum(self, ws: Any) -> np.ndarray:
        """Mass of every node: the sum of the weights of the vocabulary entries below it.

        Args:
            ws: One weight per entry of ``decode``, shape ``(len(decode),)``: a NumPy
                array or torch tensor (any device) of floats.

        Returns:
            Node-indexed sums, shape ``(len(children),)``.

        Raises:
            InvalidWeightsError: Wrong shape, dimension or dtype, or a NaN weight.
        """
        return self._one("sum", "weight_sum", ws)

    def weight_max(self, ws: Any) -> np.ndarray:
        """Max weight of the vocabulary entries below every node, as [`weight_sum`][].

        Correct for log-space weights: an inner node starts from -inf, not 0.
        """
        return self._one("max", "weight_max", ws)

    def batch_weight_sum(self, ws: Any) -> np.ndarray:
        """[`weight_sum`][] of a batch, computed together: shape ``(batch, len(children))``.

        ``ws`` has shape ``(batch, len(decode))``, or is a sequence of weight vectors.
        """
        return self._many("sum", "weight_sum", ws)

    def batch_weight_max(self, ws: Any) -> np.ndarray:
        """[`weight_max`][] of a batch, as [`batch_weight_sum`][]."""
        return self._many("max", "weight_max", ws)

    @property
    def parent(self) -> np.ndarray:
        """``parent[node]`` (int32, read-only); -1 for the root. Always ``parent[v] > v``."""
        return self._arrays.parent

    @property
    def token_leaf(self) -> np.ndarray:
        """``token_leaf[i]``: the leaf node of ``decode[i]`` (int32, read-only)."""
        return self._arrays.token_leaf

    @functools.cached_property
    def idx_to_leaf(self) -> np.ndarray:
        """``(position, leaf)`` rows for every vocabulary entry (int32), as genlm-backend."""
        n = len(self._arrays.token_leaf)
        return np.stack([np.arange(n, dtype=np.int32), self._arrays.token_leaf], axis=1)

    @functools.cached_property
    def children(self) -> ChildrenView:
        """``children[node]``: dict edge -> child. Leaf edges are keyed ``(None, i)``."""
        return ChildrenView(self._arrays, self._vocab.letter)

    @functools.cached_property
    def node2prefix(self) -> PrefixView:
        """``node2prefix[node]``: list of the letters from the root to ``node``."""
        return PrefixView(self._arrays, self._vocab.letter)

    @functools.cached_property
    def word2leaf(self) -> dict[Hashable, int]:
        """Word key -> leaf: ``(bytes, token_id)`` for a Token, the entry itself otherwise."""
        vocab = self._vocab
        leaves = self._arrays.token_leaf.tolist()
        if vocab.kinds is None:
            return {
                (bytes(t), t.token_id): leaf for t, leaf in zip(self.decode, leaves, strict=True)
            }
        return {
            word_key(item, vocab.kind(i)): leaf
            for i, (item, leaf) in enumerate(zip(self.decode, leaves, strict=True))
        }

    def _check_duplicates(self) -> None:
        # Entries spelling the same word as another must have distinct word2leaf keys
        # (keys of different words differ: they contain the word).
        seen: dict[Hashable, int] = {}
        for pos in np.unique(self._arrays.duplicates).tolist():
            kind = self._vocab.kind(pos)
            first = seen.setdefault((kind, word_key(self.decode[pos], kind)), pos)
            if first == pos:
                continue
            hint = {
                TOKEN: "the same Token appears twice",
                PLAIN_BYTES: "plain bytes must be unique; pass Tokens (decode_vocab) "
                "so several token ids may spell the same bytes",
                OTHER: "entries must be unique",
            }[kind]
            raise InvalidVocabularyError(  # genlm-backend's words, then the details
                f"Duplicate word in vocabulary: decode[{pos}] = {self.decode[pos]!r} "
                f"repeats decode[{first}] = {self.decode[first]!r}; {hint}"
            )

    def _weights(self, ws: Any, what: str, batch: bool) -> Any:
        """Weights as `_fill` takes them (a subclass may keep them on its device)."""
        return (as_batch if batch else as_vector)(ws, len(self._arrays.token_leaf), what)

    def _one(self, op: str, what: str, ws: Any) -> np.ndarray:
        arr = self._weights(ws, what, batch=False)
        masses, bad = self._fill_one(op, arr)
        if bad >= 0:
            raise nan_error(what, bad, self.decode[bad])
        return masses

    def _many(self, op: str, what: str, ws: Any) -> np.ndarray:
        arr = self._weights(ws, what, batch=True)
        if arr.shape[0] == 0:
            return np.empty((0, self.num_nodes), dtype=self.out_dtype)
        masses, bad = self._fill(op, arr)
        rows = np.flatnonzero(bad >= 0)
        if rows.size:
            row = int(rows[0])
            raise nan_error(f"batch_{what}", int(bad[row]), self.decode[int(bad[row])], row)
        return masses
