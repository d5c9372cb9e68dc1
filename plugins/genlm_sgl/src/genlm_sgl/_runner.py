"""Runs batches of prompts through an in-process SGLang scheduler and collects every row.

Requests are queued together and the scheduler is stepped until each has finished.
SGLang plans the batches itself (at most ``max_running_requests`` per step, long
prompts split by chunked prefill, prefixes reused from its radix cache); rows are
matched to requests by request id, so nothing depends on that plan. A request that
ends without a row (aborted by SGLang) raises
[`EngineOutputError`][genlm_sgl.errors.EngineOutputError] naming it; on any failure the batch's
unfinished requests are aborted so the next batch starts clean.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from genlm_sgl._compat import InProcessScheduler
from genlm_sgl.errors import EngineOutputError

__all__ = ["SchedulerRunner"]


class SchedulerRunner:
    """Next-token log-probs of prompts from an [`InProcessScheduler`][].

    Args:
        scheduler: The in-process scheduler (shared by every wrapper of one engine).
        width: Width of the model's logits (the log-prob vectors).
    """

    def __init__(self, scheduler: InProcessScheduler, width: int) -> None:
        self.scheduler = scheduler
        self.width = width
        self.lock = scheduler.lock

    def logprobs(
        self,
        prompts: Sequence[tuple[Sequence[int], str | None]],
        rows: Callable[[int], list[torch.Tensor]],
    ) -> list[torch.Tensor]:
        """Log-probs after each ``(token_ids, lora_id)``, in order.

        Args:
            prompts: The distinct requests.
            rows: ``rows(n)`` gives ``n`` float32 rows of ``width`` to fill.
        """
        out = rows(len(prompts))
        with self.lock:
            sched = self.scheduler
            rids = sched.add(prompts)
            pending = {rid: i for i, rid in enumerate(rids)}
            failed: list[str] = []
            try:
                while pending:
                    stepped = sched.step()
                    if stepped is None:
                        break
                    finished, logits = stepped
                    self._take(finished, logits, pending, out, failed)
            except BaseException:
                sched.abort(list(pending))
                raise
            if pending or failed:
                sched.abort(list(pending))
                missing = [f"{rid} (never finished)" for rid in list(pending)[:5]]
                raise EngineOutputError(
                    f"SGLang returned no log-probs for {len(pending) + len(failed)} of "
                    f"{len(prompts)} requests: {', '.join((failed + missing)[:5])}"
                )
        return out

    def _take(
        self,
        finished: list[tuple[int, str, str | None]],
        logits: Any,
        pending: dict[str, int],
        out: list[torch.Tensor],
        failed: list[str],
    ) -> None:
        """Log-softmax the rows of this step's finished requests into their outputs."""
        mine = [(row, rid, err) for row, rid, err in finished if rid in pending]
        if not mine:
            return
        if logits is None or logits.dim() != 2 or logits.shape[1] != self.width:
            shape = None if logits is None else tuple(logits.shape)
            raise EngineOutputError(
                f"SGLang's next-token logits have shape {shape}, expected (batch, {self.width})"
            )
        good = [(row, rid) for row, rid, err in mine if err is None]
        failed.extend(f"{rid} ({err})" for _, rid, err in mine if err is not None)
        for _, rid, err in mine:
            if err is not None:
                pending.pop(rid)
        if not good:
            return
        index = torch.tensor([row for row, _ in good], device=logits.device)
        values = torch.log_softmax(logits.index_select(0, index).float(), dim=-1).cpu()
        for k, (_, rid) in enumerate(good):
            out[pending.pop(rid)].copy_(values[k])
