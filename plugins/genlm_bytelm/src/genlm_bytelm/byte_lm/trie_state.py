"""``LazyTrieState``: one candidate of the beam, a position in the token trie.

``mass[node]`` is the log-probability, after the context, of the tokens starting with the
node's bytes; reading a byte adds ``mass[child] - mass[node]`` to the weight. Masses are
computed by [`LazyTrieState.materialize`][], only for states that pass pruning.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch

from genlm_bytelm.byte_lm.lm_state import StatefulTokenizedLM
from genlm_bytelm.display import escape
from genlm_bytelm.errors import NotMaterializedError
from genlm_bytelm.probs import EOS, EOT, LazyByteProbs
from genlm_core.trie.protocols import TrieMode

__all__ = ["EOS", "LazyTrieState", "StatefulTokenizedLM", "TrieMode"]


class LazyTrieState:
    """A candidate tokenization: context, trie node, weight, and (lazily) masses.

    Args:
        lm_state: The token context (a ``StatefulTokenizedLM``).
        trie: The ``AsyncTokenByteTrie`` of the model's vocabulary.
        weight: Log-probability of the bytes read along this tokenization.
        mass: Log-masses of every trie node under the context's distribution, if known.
        mode: ``TrieMode.WITH_EOS`` (EOS tokens count at the EOS node) or ``WITHOUT_EOS``.
        terminated: EOS has been read: no byte may follow.
    """

    def __init__(
        self,
        lm_state: Any,
        trie: Any,
        node: int,
        weight: float,
        mass: np.ndarray | None = None,
        mode: Any = TrieMode.WITH_EOS,
        terminated: bool = False,
    ) -> None:
        self.lm_state = lm_state
        self.trie = trie
        self.node = node
        self.weight = weight
        self._mass = mass
        self._extend: list[LazyTrieState] | None = None
        self.mode = TrieMode(mode) if isinstance(mode, str) else mode  # or its value
        self.root = trie.trie.root
        self.children = trie.trie.children
        self.terminated = terminated

    @classmethod
    def initial(cls, lm: Any, trie: Any, mode: Any = TrieMode.WITH_EOS) -> LazyTrieState:
        """The state at the trie's root after the model's start token, weight 0."""
        return cls(
            lm_state=StatefulTokenizedLM.initial(lm),
            trie=trie,
            node=trie.trie.root,
            weight=0.0,
            mode=mode,
        )

    @property
    def partial(self) -> list[int]:
        """The bytes read since the last token boundary (the node's prefix)."""
        return self.trie.trie.node2prefix[self.node]

    @property
    def mass(self) -> np.ndarray:
        """Log-mass of every trie node; ``NotMaterializedError`` before [`materialize`][]."""
        if self._mass is None:
            raise NotMaterializedError(
                "State is not yet materialized: await state.materialize() first"
            )
        return self._mass

    @property
    def is_materialized(self) -> bool:
        """Whether the masses are known."""
        return self._mass is not None

    def with_mode(self, mode: Any) -> LazyTrieState:
        """The same state in another [`TrieMode`][] (masses kept)."""
        return type(self)(
            lm_state=self.lm_state,
            trie=self.trie,
            node=self.node,
            weight=self.weight,
            mass=self._mass,
            mode=mode,
            terminated=self.terminated,
        )

    def actions(self) -> dict[Any, int]:
        """Edges out of the current node: byte (int), EOS, or ``(eot_sentinel, token_id)``."""
        return self.children[self.node]

    def get_all_EOT(self) -> list[tuple[int, int]]:  # noqa: N802 - genlm-bytes' name
        """``(leaf, token_id)`` of every token ending at the current node (duplicates too)."""
        return eot_edges(self.trie.trie, self.node)

    def __lshift__(self, b: int) -> LazyTrieState | None:
        """The state after reading byte ``b`` (or ``EOS``), None if the trie has no such edge."""
        if self.terminated:
            return None
        node = self.children[self.node].get(b)
        if node is None:
            return None
        mass = self.mass
        return type(self)(
            lm_state=self.lm_state,
            trie=self.trie,
            mass=mass,
            node=node,
            weight=self.weight + mass.item(node) - mass.item(self.node),
            mode=self.mode,
            terminated=b == EOS,
        )

    def extend_all(self) -> list[LazyTrieState]:
        """The states after ending the token here: one per token id, at the root, unmaterialized."""
        if self._extend is None:
            mass = self.mass
            here = mass.item(self.node)
            self._extend = [
                type(self)(
                    lm_state=self.lm_state << int(token_id),
                    trie=self.trie,
                    node=self.root,
                    weight=self.weight + mass.item(leaf) - here,
                    mode=self.mode,
                )
                for leaf, token_id in self.get_all_EOT()
            ]
        return self._extend

    @functools.cached_property
    def logp_next(self) -> LazyByteProbs:
        """Log-probabilities of the next byte, EOT (256) and EOS (257) from this state."""
        logps = np.full(258, -np.inf)
        mass = self.mass
        logz = mass.item(self.node)
        eot: list[float] = []
        for key, node in self.actions().items():
            if type(key) is tuple:  # (eot_sentinel, token_id): the end of a token
                eot.append(mass.item(node) - logz)
            elif isinstance(key, int):  # a byte or EOS
                logps[key] = mass.item(node) - logz
            else:
                raise ValueError(
                    f"Unexpected edge key type: {type(key).__name__} (value: {key!r}): the "
                    f"byte beam reads one byte at a time, so the trie cannot have atomic "
                    f"multi-byte edges (atomic_byte_strings)"
                )
        if eot:
            logps[EOT] = np.logaddexp.reduce(eot) if len(eot) > 1 else eot[0]
        return LazyByteProbs(logps)

    async def materialize(self) -> LazyTrieState:
        """Compute the masses (one model call, one trie call), if not done yet."""
        if self._mass is None:
            logps = await self.lm_state.logp_next()
            self._mass = await _log_masses(self.trie, logps, self.mode)
        return self

    def __repr__(self) -> str:
        end = "<EOS>" if self.terminated else ""
        return f"{self.weight:.2f}: {self.lm_state}|{escape(bytes(self.partial))}{end}"

    async def cleanup(self) -> None:
        """Stop the trie's batching (it restarts on the next request)."""
        await self.trie.cleanup()


async def _log_masses(trie: Any, logps: Any, mode: Any) -> np.ndarray:
    """``log(weight_sum(exp(logps)))`` as a float64 array, batched with concurrent calls."""
    batched = getattr(trie, "log_weight_sum", None)
    if batched is not None:
        return await batched(logps, mode)
    masses = await trie.weight_sum(torch.exp(torch.as_tensor(logps)), mode)
    with np.errstate(divide="ignore"):
        masses = np.asarray(masses.cpu() if hasattr(masses, "cpu") else masses)
        return np.log(masses, dtype=np.float64)


def eot_edges(trie: Any, node: int) -> list[tuple[int, int]]:
    """``(leaf, token_id)`` of every token ending at ``node`` of a trie (duplicates too)."""
    sentinel = trie.eot_sentinel
    return [
        (leaf, key[1])
        for key, leaf in trie.children[node].items()
        if type(key) is tuple and key[0] == sentinel
    ]


def trie_path(trie: Any, data: Any) -> list[int]:
    """The nodes of a trie along the bytes ``data`` from its root, as far as it has edges."""
    children, node, nodes = trie.children, trie.root, [trie.root]
    for b in data:
        node = children[node].get(b)
        if node is None:
            break
        nodes.append(node)
    return nodes
