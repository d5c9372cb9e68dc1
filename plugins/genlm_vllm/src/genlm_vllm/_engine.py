"""Runs batches of requests through a vLLM ``LLMEngine`` and collects every result.

Requests are added with ``LLMEngine.add_request`` and the engine is stepped until each
of them has finished. vLLM schedules them however it likes (at most ``max_num_seqs``
per step, prefills split into chunks, preemption under memory pressure); results are
keyed by request id, so nothing depends on that order. A request the engine finishes
without a result (aborted, errored) raises
[`EngineOutputError`][genlm_vllm.errors.EngineOutputError]
naming it, and on any failure this batch's unfinished requests are aborted so the next
batch starts clean.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import torch

from genlm_vllm._compat import RowCapture, mixes_base_and_lora_rows, step_groups
from genlm_vllm._streaming import LiveRunner
from genlm_vllm.errors import EngineOutputError

__all__ = ["EngineRunner"]

#: Request ids are unique per process: several wrappers may share one engine.
_REQUEST_IDS = itertools.count()


class EngineRunner:
    """Adds requests to an ``LLMEngine``, steps it, returns results in request order.

    Args:
        engine: ``vllm.LLM(...).llm_engine``.
        width: Width of the model's logits (the log-prob vectors).
    """

    def __init__(self, engine: Any, width: int) -> None:
        from vllm import SamplingParams

        self.engine = engine
        self.width = width
        self.capture = RowCapture.of(engine)
        self.lock = self.capture.lock
        self._mix_lora = mixes_base_and_lora_rows(engine)
        # Greedy (temperature 0): no random draw; the row is the raw model log-softmax.
        self._logprob_params = SamplingParams(
            max_tokens=1, temperature=0.0, logprobs=-1, detokenize=False
        )

    def logprobs(self, prompts: Sequence[tuple[Sequence[int], Any]]) -> list[torch.Tensor]:
        """Next-token log-probs of each ``(token_ids, lora_request)``, in order."""
        groups = step_groups([lora for _, lora in prompts], self._mix_lora)
        if len(groups) > 1:  # base-model and LoRA rows in runs of their own
            rows: dict[int, torch.Tensor] = {}
            for part in groups:
                rows.update(zip(part, self.logprobs([prompts[i] for i in part]), strict=True))
            return [rows[i] for i in range(len(prompts))]
        with self.lock:
            ids, _ = self._run([(p, self._logprob_params, lora) for p, lora in prompts], True)
            rows = []
            try:
                for rid in ids:
                    row = self.capture.take(rid, self.width)
                    if row is None:
                        raise EngineOutputError(
                            f"vLLM finished request {rid} without its log-probs"
                        )
                    rows.append(row)
            finally:
                for rid in ids:
                    self.capture.forget(rid)
            return rows

    def generate(self, prompts: Sequence[tuple[Sequence[int], Any, Any]]) -> list[list[int]]:
        """Generated token ids of each ``(token_ids, sampling_params, lora_request)``."""
        with self.lock:
            _, outputs = self._run(prompts, False)
            return [list(out.outputs[0].token_ids) for out in outputs]

    def _run(self, requests: Sequence[tuple[Sequence[int], Any, Any]], watch: bool):
        """Add ``requests``, step until all finish; return their engine ids and outputs."""
        from vllm.inputs import TokensPrompt

        engine = self.engine
        live = LiveRunner.existing(engine)
        if live is not None:  # parked live contexts hold request slots these may need
            live.release()
        internal: dict[str, str] = {}  # our request id -> the engine's (internal) id
        done: dict[str, Any] = {}
        try:
            for token_ids, params, lora in requests:
                name = f"genlm-{next(_REQUEST_IDS)}"
                rid = engine.add_request(
                    name,
                    TokensPrompt(prompt_token_ids=list(token_ids)),
                    params,
                    lora_request=lora,
                )
                internal[name] = rid
                if watch:
                    self.capture.watch(rid)
            while len(done) < len(internal):
                if not engine.has_unfinished_requests():
                    break
                for out in engine.step():
                    if out.finished and out.request_id in internal:
                        done[out.request_id] = out
        except BaseException:
            self._abort(internal, done)
            raise
        missing = [name for name in internal if name not in done]
        failed = [
            f"{name} ({out.outputs[0].finish_reason})"
            for name, out in done.items()
            if not out.outputs or out.outputs[0].finish_reason not in ("length", "stop")
        ]
        if missing or failed:
            self._abort(internal, done)
            raise EngineOutputError(
                f"vLLM returned no result for {len(missing) + len(failed)} of "
                f"{len(internal)} requests (missing: {missing[:5]}, ended early: "
                f"{failed[:5]}); the engine may have run out of KV-cache memory or been "
                f"shut down"
            )
        return list(internal.values()), [done[name] for name in internal]

    def _abort(self, internal: dict[str, str], done: dict[str, Any]) -> None:
        unfinished = [rid for name, rid in internal.items() if name not in done]
        for rid in internal.values():
            self.capture.forget(rid)
        if unfinished:
            try:
                self.engine.abort_request(unfinished, internal=True)
            except Exception:  # noqa: BLE001 - the original error matters more
                pass
