"""One forward per sequence for ``prefix_next_token_logprobs``: every position's logits.

A causal LM's forward computes the logits of every position of its input at once, so
the next-token log-probs after every prefix of a known sequence (a byte-level beam's
prefill, scoring a text) cost one forward over the sequence's new tokens instead of
one forward per prefix. The keys and values of the whole sequence go into the prefix
cache and every row into the output cache (the core stores them), so later calls
along the sequence are hits and calls branching off it run only their own tokens.

[`PrefixForwards`][] is an object [`AsyncTransformer`][genlm_hf.lm.AsyncTransformer] holds: its
``compute_prefix_batch`` (the core's optional hook) calls [`PrefixForwards.compute`][]
per adapter. It is handed the model's forward steps ([`ForwardSteps`][]), the output
cache and the sizes it plans by; it reads nothing else of the model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from genlm_backend_kit import plan_groups
from genlm_core.lm import PrefixRequest, Request
from genlm_core.runtime import OutputCache
from genlm_hf._forward import ForwardInput

__all__ = ["PREFIX_LOGITS_BYTES", "ForwardSteps", "PrefixForwards"]

#: Most bytes of logits one forward of [`PrefixForwards.compute`][] keeps
#: (all its positions'); longer sequences are computed in chunks.
PREFIX_LOGITS_BYTES = 64 << 20


@dataclasses.dataclass(frozen=True)
class ForwardSteps:
    """The steps of one prefix-cached forward, as the model does them."""

    #: ``(adapter, token_ids, first=)`` -> the input from the longest cached prefix.
    forward_input: Callable[..., ForwardInput]
    #: ``(group, all_positions=)`` -> ``(logits, key/value buffer, width of the pasts)``.
    forward: Callable[..., tuple[torch.Tensor, Any, int]]
    #: ``logits`` -> float32 log-probability rows.
    log_softmax: Callable[[torch.Tensor], list[torch.Tensor]]
    #: ``(adapter, group, buffer, width)``: keep the new keys and values in the prefix cache.
    store_kv: Callable[[str | None, list[ForwardInput], Any, int], None]


class PrefixForwards:
    """The forwards of [`compute_prefix_batch`][genlm_hf.lm.AsyncTransformer.compute_prefix_batch].

    Args:
        steps: The model's forward steps.
        cache: The model's output cache (None: off), read for rows already known.
        width: The rows' length (the byte vocabulary's size).
        bytes_per_token: Key/value bytes of one token (0: prefix reuse off).
        max_batch_kv_bytes: Cap on one forward's keys and values.
    """

    def __init__(
        self,
        steps: ForwardSteps,
        *,
        cache: OutputCache | None,
        width: int,
        bytes_per_token: int,
        max_batch_kv_bytes: int,
    ) -> None:
        self._steps = steps
        self._cache = cache
        self._width = width
        self._bytes_per_token = bytes_per_token
        self._max_batch_kv_bytes = max_batch_kv_bytes

    def compute(self, adapter: str | None, reqs: list[PrefixRequest]) -> list[list[torch.Tensor]]:
        """Rows of the wanted prefixes of each sequence (positions ``start`` on).

        The leading ones come from the output cache, the rest from forwards over the
        sequences' new tokens, each from the longest cached prefix of its keys/values.
        """
        steps = self._steps
        rows: list[list[Any]] = [[None] * len(r.token_ids) for r in reqs]  # by position
        done = [self._cached_leading_rows(r, rows[k]) for k, r in enumerate(reqs)]
        vocab_bytes = self._width * 4
        per_token = self._bytes_per_token
        while pending := [k for k, r in enumerate(reqs) if done[k] < len(r.token_ids)]:
            # Every position's logits are kept: chunk the sequences to bound them.
            chunk = max(1, PREFIX_LOGITS_BYTES // (vocab_bytes * len(pending)))
            owner: dict[int, int] = {}  # id(row) -> index of its request
            group = []
            for k in pending:
                ids = reqs[k].token_ids
                row = steps.forward_input(adapter, ids[: done[k] + chunk], first=done[k])
                owner[id(row)] = k
                group.append(row)
            for index, planned in enumerate(
                plan_groups(group, per_token, self._max_batch_kv_bytes)
            ):
                ks = [owner[id(row)] for row in planned]
                if index:  # a forward's inserts may have evicted the slots found before
                    planned = [
                        steps.forward_input(adapter, r.token_ids, first=r.past_len) for r in planned
                    ]
                outs = self._forward_all_positions(adapter, planned)
                for k, row, out in zip(ks, planned, outs, strict=True):
                    rows[k][row.past_len : len(row.token_ids)] = out
                    done[k] = len(row.token_ids)
        return [r[req.start :] for r, req in zip(rows, reqs, strict=True)]

    def _cached_leading_rows(self, req: PrefixRequest, rows: list[Any]) -> int:
        """Fill ``rows`` from ``req.start`` with the output cache's leading run of hits.

        Returns:
            The first position still to compute.
        """
        n = req.start
        ids, lora_name = req.token_ids, req.lora_name
        cache = self._cache
        while cache is not None and n < len(ids):
            hit = cache.get(Request(ids[: n + 1], lora_name, req.generation))
            if hit is None:
                break
            rows[n] = hit
            n += 1
        return n

    def _forward_all_positions(
        self, adapter: str | None, group: list[ForwardInput]
    ) -> list[list[Any]]:
        """One forward over ``group`` keeping every new position; K/V stored. Rows per row."""
        steps = self._steps
        logits, buffer, width_past = steps.forward(group, all_positions=True)
        outs = [steps.log_softmax(logits[i, : row.n_new]) for i, row in enumerate(group)]
        steps.store_kv(adapter, group, buffer, width_past)
        return outs
