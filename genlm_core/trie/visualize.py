"""Draw a (small) token trie with Graphviz, optionally showing node masses."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

__all__ = ["Drawable", "visualize"]


class Drawable(Protocol):
    """What [`visualize`][] reads of a trie (any ``FlatTrie`` has it).

    A Protocol, so this module imports no trie class (``base`` imports it lazily).
    """

    @property
    def children(self) -> Sequence[Mapping[Hashable, int]]:
        """``children[node]``: edge -> child."""
        ...

    @property
    def node2prefix(self) -> Sequence[Any]:
        """``node2prefix[node]``: the letters from the root."""
        ...

    @property
    def leaf2word(self) -> Mapping[int, Hashable]:
        """Leaf node -> word key."""
        ...


def visualize(trie: Drawable, ws: Any = None) -> Any:
    """A ``graphviz.Digraph`` of ``trie`` (render it, or display it in a notebook).

    ``ws``: optional node-indexed values (e.g. from ``weight_sum``), shown in each
    node and used to shade it.

    Raises:
        ImportError: The graphviz package is not installed.
        ValueError: ``ws`` does not have one value per node.
    """
    try:
        import graphviz
    except ImportError:
        raise ImportError(
            "visualize() needs the graphviz Python package: pip install graphviz "
            "(and the Graphviz binaries to render, e.g. apt-get install graphviz)"
        ) from None
    n = len(trie.children)
    values = None
    if hasattr(ws, "detach"):  # a torch tensor, on any device
        ws = ws.detach().cpu().numpy()
    if ws is not None:
        values = np.asarray(ws, dtype=np.float64).reshape(-1)
        if values.shape[0] != n:
            raise ValueError(
                f"visualize: ws must have one value per trie node, shape ({n},); "
                f"got shape {np.shape(ws)} (pass the result of weight_sum or weight_max)"
            )
    top = float(np.max(values)) if values is not None and n else 0.0
    dot = graphviz.Digraph(comment="Token character trie")
    dot.attr(rankdir="LR")
    leaves = trie.leaf2word
    for node in range(n):
        label = f"{node}\n{trie.node2prefix[node]!r}"
        color = "#ffffff"
        if values is not None:
            label += f"\n{values[node]:.4g}"
            if top > 0 and np.isfinite(values[node]) and values[node] > 0:
                shade = int(255 * (1 - min(values[node] / top, 1.0)))
                color = f"#{shade:02x}ff{shade:02x}"
        shape = "doublecircle" if node in leaves else "circle"
        dot.node(str(node), label, shape=shape, style="filled", fillcolor=color)
    for node in range(n):
        for edge, child in trie.children[node].items():
            if isinstance(edge, tuple) and edge[0] is None:
                text = f"end of entry {edge[1]}"
            elif isinstance(edge, int) and 32 <= edge < 127:
                text = f"{edge} {chr(edge)!r}"
            else:
                text = repr(edge)
            dot.edge(str(node), str(child), label=text)
    return dot
