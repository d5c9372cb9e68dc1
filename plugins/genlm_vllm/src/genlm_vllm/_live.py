"""The table of live contexts: engine requests kept alive to be extended, least recent first.

A live context is a resumable vLLM request whose last input chunk has been computed: the
engine core holds its K/V (its KV blocks and one request slot) and waits for its next
chunk. A call whose context is a live context plus one token is sent as that one token
(see `genlm_vllm._streaming`). This module is the bookkeeping only, without vLLM:
which contexts are live, which one a call extends, and which to release when slots or
KV blocks run short. Release is always of idle contexts (none of the current wave), least
recently used first; releasing one never loses a row, it only makes its next extension a
fresh request.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

__all__ = ["LiveContext", "LiveTable"]

#: A context's key: its token ids and the engine id of its LoRA adapter (None: base model).
Key = tuple[tuple[int, ...], Hashable]


@dataclass
class LiveContext:
    """One live engine request: its engine id and the context its K/V covers."""

    request_id: str
    key: Key

    @property
    def length(self) -> int:
        return len(self.key[0])


class LiveTable:
    """Live contexts by key, in least-recently-used order, within slot and block budgets.

    Args:
        slots: Most live contexts at once (the engine's request slots: a paused
            resumable request keeps its slot, and a wave needs one per request).
        blocks: KV blocks live contexts may hold at once.
        block_size: Tokens per KV block.
    """

    def __init__(self, slots: int, blocks: int, block_size: int) -> None:
        if slots < 1 or blocks < 1 or block_size < 1:
            raise ValueError(
                f"LiveTable needs slots, blocks and block_size >= 1, got {slots}, "
                f"{blocks}, {block_size}"
            )
        self.slots = slots
        self.blocks = blocks
        self.block_size = block_size
        self._live: OrderedDict[Key, LiveContext] = OrderedDict()

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, key: Key) -> bool:
        return key in self._live

    def blocks_of(self, length: int) -> int:
        """KV blocks a context of ``length`` tokens may hold (its sampled slot included)."""
        return -(-(length + 1) // self.block_size)

    def held_blocks(self) -> int:
        """Blocks all live contexts may hold (an upper bound: shared prefix blocks count twice)."""
        return sum(self.blocks_of(ctx.length) for ctx in self._live.values())

    def extends_live(self, key: Key) -> bool:
        """Whether ``key`` is a live context plus one token."""
        ids, lora = key
        return len(ids) >= 2 and (ids[:-1], lora) in self._live

    def claim(self, key: Key) -> LiveContext | None:
        """Take the live context ``key`` extends by its last token, if any (it leaves the table)."""
        ids, lora = key
        if len(ids) < 2:
            return None
        return self._live.pop((ids[:-1], lora), None)

    def add(self, ctx: LiveContext) -> LiveContext | None:
        """Make ``ctx`` live (most recent); return a live context it displaces (same key)."""
        old = self._live.pop(ctx.key, None)
        self._live[ctx.key] = ctx
        return old

    def make_room(self, slots: int, blocks: int) -> list[LiveContext]:
        """Remove least-recent contexts until ``slots`` slots and ``blocks`` blocks are free.

        Returns the removed contexts (to be released in the engine). If even an empty
        table leaves too little, everything is removed and the caller's wave is what
        is too large.
        """
        removed = []
        held = self.held_blocks()
        while self._live and (len(self._live) + slots > self.slots or held + blocks > self.blocks):
            _, ctx = self._live.popitem(last=False)
            held -= self.blocks_of(ctx.length)
            removed.append(ctx)
        return removed

    def remove_where(self, lora_ids: Iterable[Hashable] | None = None) -> list[LiveContext]:
        """Remove every live context (``lora_ids``: only those under these adapters)."""
        wanted = None if lora_ids is None else set(lora_ids)
        keys = [k for k in self._live if wanted is None or k[1] in wanted]
        return [self._live.pop(k) for k in keys]
