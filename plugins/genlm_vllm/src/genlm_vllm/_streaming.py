"""Live contexts through vLLM's streaming inputs: an extending call computes its new token only.

vLLM 0.32's engine core supports *resumable* requests (streaming inputs, the path of
``AsyncLLM.generate`` given an async generator of ``StreamingInput``): a request created
with ``resumable=True`` does not end when its turn does; the scheduler parks it
(``WAITING_FOR_STREAMING_REQ``) with its KV blocks and request slot, and a later
``EngineCoreRequest`` with the same request id appends its tokens to the prompt, drops
the turn's sampled token, and computes the new tokens only. It lives in the engine
core's scheduler, not in the model runner, so it works with every executor
(multiprocessing tensor parallelism, Ray, pipeline parallelism).

[`LiveRunner`][] uses it for next-token rows: each context it computes stays live
(``max_tokens=1``, ``logprobs=-1``), and a call whose context is a live context plus
one token is sent as that one token. Rows come out of the engine-core outputs through
`RowCapture`, keyed by request id, as on the per-call path.
Live contexts are bounded by `LiveTable` (request slots and KV
blocks, least recently used released first, released also before any other engine run
needs the slots); a released context's next extension is simply a fresh request, so no
row is ever lost or taken from the wrong context. One runner per engine
([`LiveRunner.of`][]), shared by every wrapper of that engine.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import torch

from genlm_vllm._compat import RowCapture, check_streaming, mixes_base_and_lora_rows, step_groups
from genlm_vllm._live import LiveContext, LiveTable
from genlm_vllm.errors import EngineOutputError

__all__ = ["KV_SHARE", "LiveRunner"]

#: Share of the engine's KV blocks that idle live contexts and a wave may hold at once;
#: the rest stays free for vLLM's own scheduling (chunked prefill, sampling runs).
KV_SHARE = 0.5
#: Engine steps a wave may take before it is declared stuck (each step computes at
#: least one scheduled request; a wave of ``max_num_seqs`` prefills needs a handful).
MAX_STEPS = 100_000

_NAMES = itertools.count()


class LiveRunner:
    """Next-token rows of ``(token_ids, lora_request)`` through live, resumable requests.

    Args:
        engine: ``vllm.LLM(...).llm_engine``.
        width: Width of the model's logits (the log-prob vectors).
    """

    def __init__(self, engine: Any, width: int) -> None:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        check_streaming(engine)
        self.engine = engine
        self.width = width
        self.capture = RowCapture.of(engine)
        self.lock = self.capture.lock
        self._mix_lora = mixes_base_and_lora_rows(engine)
        config = engine.vllm_config
        sched = config.scheduler_config
        slots = getattr(sched, "max_num_active_seqs", None) or sched.max_num_seqs
        cache = config.cache_config
        blocks = max(1, int((cache.num_gpu_blocks or 0) * KV_SHARE))
        self.table = LiveTable(slots=int(slots), blocks=blocks, block_size=cache.block_size)
        self._tasks = engine.get_supported_tasks()
        # Greedy, one token, EOS ignored: every turn ends by length with its raw row.
        self._params = SamplingParams(
            max_tokens=1,
            temperature=0.0,
            logprobs=-1,
            detokenize=False,
            ignore_eos=True,
            output_kind=RequestOutputKind.DELTA,  # streaming inputs refuse FINAL_ONLY
        )
        #: Tokens sent to the engine (new contexts whole, extensions one each).
        self.sent_tokens = 0
        self.extended = 0
        self.started = 0

    @classmethod
    def of(cls, engine: Any, width: int) -> LiveRunner:
        """The engine's runner, made on first use (live contexts are per engine)."""
        runner = engine.__dict__.get("_genlm_live_runner")
        if runner is None:
            runner = cls(engine, width)
            engine._genlm_live_runner = runner
        return runner

    @staticmethod
    def existing(engine: Any) -> LiveRunner | None:
        """The engine's runner if one was made."""
        return engine.__dict__.get("_genlm_live_runner")

    # -- rows ---------------------------------------------------------------------------

    def logprobs(self, prompts: Sequence[tuple[Sequence[int], Any]]) -> list[torch.Tensor]:
        """Next-token log-probs of each ``(token_ids, lora_request)``, in order."""
        with self.lock:
            rows: list[torch.Tensor | None] = [None] * len(prompts)
            for wave in self._waves(prompts):
                for i, row in zip(wave, self._run_wave([prompts[i] for i in wave]), strict=True):
                    rows[i] = row
            return rows  # type: ignore[return-value]

    def _waves(self, prompts: Sequence[tuple[Sequence[int], Any]]) -> list[list[int]]:
        """Indices in waves that fit the slots and blocks (base and LoRA apart where needed)."""
        table = self.table
        waves: list[list[int]] = []
        for group in step_groups([lora for _, lora in prompts], self._mix_lora):
            # Extensions of live contexts first: a wave releases the idle contexts it
            # needs room from, which must not be the ones later waves would extend.
            group.sort(key=lambda i: not table.extends_live(_key(prompts[i])))
            wave: list[int] = []
            blocks = 0
            for i in group:
                need = table.blocks_of(len(prompts[i][0]))
                if wave and (len(wave) >= table.slots or blocks + need > table.blocks):
                    waves.append(wave)
                    wave, blocks = [], 0
                wave.append(i)
                blocks += need
            if wave:
                waves.append(wave)
        return waves

    def _run_wave(self, prompts: Sequence[tuple[Sequence[int], Any]]) -> list[torch.Tensor]:
        """Send one wave (each request live after it), step until every row is in."""
        table = self.table
        keys = [_key(prompt) for prompt in prompts]
        claimed = [table.claim(key) for key in keys]
        blocks = sum(table.blocks_of(len(key[0])) for key in keys)
        self._abort([ctx.request_id for ctx in table.make_room(len(keys), blocks)])
        rids: list[str] = []  # the wave's engine ids, in prompt order
        try:
            for (ids, lora), ctx in zip(prompts, claimed, strict=True):
                if ctx is None:
                    rids.append(self._add(list(ids), lora, None))
                    self.started += 1
                else:
                    rids.append(self._add([int(ids[-1])], lora, ctx.request_id))
                    self.extended += 1
            self._step_until_done(rids)
            rows = [self._row(rid) for rid in rids]
        except BaseException:  # the claimed contexts too, sent or not: they left the table
            claimed_ids = [ctx.request_id for ctx in claimed if ctx is not None]
            self._abort(list(dict.fromkeys([*claimed_ids, *rids])))
            raise
        for rid, key in zip(rids, keys, strict=True):
            old = table.add(LiveContext(rid, key))
            if old is not None:  # a duplicate context: the older copy goes
                self._abort([old.request_id])
        return rows

    def _add(self, ids: list[int], lora: Any, request_id: str | None) -> str:
        """Send ``ids`` as a new resumable request, or as the next chunk of ``request_id``."""
        from vllm.inputs import TokensPrompt

        name = f"genlm-live-{next(_NAMES)}"
        request = self.engine.input_processor.process_inputs(
            name,
            TokensPrompt(prompt_token_ids=ids),
            self._params,
            supported_tasks=self._tasks,
            lora_request=lora,
            resumable=True,
        )
        if request_id is None:
            self.engine.input_processor.assign_request_id(request)
        else:  # the next chunk of a live request: its engine id (as AsyncLLM sends it)
            request.request_id = request_id
            request.external_req_id = name
        self.capture.watch(request.request_id)
        self.engine.engine_core.add_request(request)
        self.sent_tokens += len(ids)
        return request.request_id

    def _step_until_done(self, rids: list[str]) -> None:
        capture = self.capture
        waiting = set(rids)
        for _ in range(MAX_STEPS):
            waiting = {rid for rid in waiting if capture.ended(rid) is None}
            if not waiting:
                return
            self.engine.step()
        raise EngineOutputError(
            f"vLLM did not finish {len(waiting)} live requests in {MAX_STEPS} steps "
            f"(e.g. {sorted(waiting)[:3]}); the engine may be out of request slots or KV "
            f"cache"
        )

    def _row(self, rid: str) -> torch.Tensor:
        from vllm.v1.engine import FinishReason

        ended = self.capture.ended(rid)
        row = self.capture.take(rid, self.width)
        if row is None or ended != FinishReason.LENGTH:
            what = "without its log-probs" if row is None else "early"
            raise EngineOutputError(
                f"vLLM finished live request {rid} {what} (it ended with {ended!r}); "
                f"its context was released, and the next call starts it afresh"
            )
        return row

    # -- release ------------------------------------------------------------------------

    def release(self, lora_ids: Sequence[int] | None = None) -> int:
        """Release every live context (or those under LoRA ids ``lora_ids``); return how many."""
        with self.lock:
            gone = self.table.remove_where(lora_ids)
            self._abort([ctx.request_id for ctx in gone])
            return len(gone)

    def _abort(self, rids: list[str]) -> None:
        for rid in rids:
            self.capture.forget(rid)
        if rids:
            try:
                self.engine.engine_core.abort_requests(rids)
            except Exception:  # noqa: BLE001 - a failing engine is reported by the caller
                pass


def _key(prompt: tuple[Sequence[int], Any]) -> tuple[tuple[int, ...], int | None]:
    ids, lora = prompt
    return tuple(ids), None if lora is None else int(lora.lora_int_id)
