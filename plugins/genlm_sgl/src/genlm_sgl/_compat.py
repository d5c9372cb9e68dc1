"""Everything genlm-sgl needs from SGLang beyond its public API, in one place.

SGLang's public Python API (``sglang.Engine``) returns full-vocabulary log-probs only
as ``top_logprobs_num=V`` lists: the engine takes a top-k over the whole vocabulary,
turns each row into ~50k Python floats and ints, ships them to a second process and
back (measured on a CPU in ``benchmarks/bench_sgl.py --only options``: several times
the forward pass). So, as genlm-backend 0.3.1 does, genlm-sgl drives SGLang's
``Scheduler`` in this process: it adds tokenized prefill-only requests
(``max_new_tokens=0``), steps the scheduler's own batch planner (continuous batching,
chunked prefill, the radix prefix cache) and takes the log-softmax of each finished
request's ``next_token_logits`` row, a tensor.

[`InProcessScheduler`][] is the only code that touches those internals. It was
written against SGLang 0.5.23 ([`SUPPORTED`][]); other versions are refused with
[`UnsupportedSGLangError`][genlm_sgl.errors.UnsupportedSGLangError] unless
``GENLM_SGL_ALLOW_UNTESTED=1`` is set, in which case [`check_scheduler`][] still
checks the pieces used here exist.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import uuid
from array import array
from collections.abc import Iterator, Sequence
from typing import Any

from genlm_backend_kit import require_pieces, require_version
from genlm_sgl.errors import EngineOutputError, UnsupportedSGLangError

__all__ = [
    "CPU_ENGINE_ENV",
    "SUPPORTED",
    "InProcessScheduler",
    "check_scheduler",
    "check_version",
    "prepare_import",
]

#: The SGLang releases genlm-sgl is tested with.
SUPPORTED = ">=0.5.23,<0.5.24"
ALLOW_ENV = "GENLM_SGL_ALLOW_UNTESTED"
#: ``check_version(version)``: raise UnsupportedSGLangError unless ``version`` is [`SUPPORTED`][]
#: (or ``GENLM_SGL_ALLOW_UNTESTED=1``), naming both versions and the fix.
check_version = functools.partial(
    require_version,
    "SGLang",
    supported=SUPPORTED,
    allow_env=ALLOW_ENV,
    install=f"'sglang{SUPPORTED}'",
    error=UnsupportedSGLangError,
)
#: SGLang reads it when its modules are imported: 1 selects its CPU code paths.
CPU_ENGINE_ENV = "SGLANG_USE_CPU_ENGINE"

#: The scheduler methods and attributes genlm-sgl uses.
_SCHEDULER_API = (
    "process_input_requests",
    "get_next_batch_to_run",
    "run_batch",
    "process_batch_result",
    "flush_cache",
    "abort_request",
    "load_lora_adapter",
    "unload_lora_adapter",
    "is_fully_idle",
)

#: One live scheduler per process: SGLang keeps its configuration process-wide.
_LIVE_LOCK = threading.Lock()
_LIVE: list[InProcessScheduler] = []
_PATCH_LOCK = threading.Lock()


def check_scheduler(scheduler: Any) -> None:
    """Check that ``scheduler`` has the pieces [`InProcessScheduler`][] uses.

    Raises:
        UnsupportedSGLangError: A piece moved (an SGLang version genlm-sgl does not know).
    """
    missing = [name for name in _SCHEDULER_API if not callable(getattr(scheduler, name, None))]
    require_pieces(
        "this SGLang's Scheduler",
        missing,
        install=f"'sglang{SUPPORTED}'",
        error=UnsupportedSGLangError,
    )


def prepare_import(device: str) -> None:
    """Select SGLang's CPU code paths for ``device="cpu"`` before sglang is imported.

    Raises:
        UnsupportedSGLangError: sglang was already imported with the other choice.
    """
    want = "1" if device == "cpu" else "0"
    have = os.environ.get(CPU_ENGINE_ENV, "0")
    if "sglang.srt.utils" in sys.modules and have != want:
        raise UnsupportedSGLangError(
            f"sglang was imported with {CPU_ENGINE_ENV}={have}, but device={device!r} needs "
            f"{CPU_ENGINE_ENV}={want} when sglang is imported; set it in the environment "
            f"before starting Python"
        )
    os.environ[CPU_ENGINE_ENV] = want


class InProcessScheduler:
    """An SGLang ``Scheduler`` in this process, stepped by the caller.

    Not thread-safe: callers hold [`lock`][]. Only one may be live per process.

    Args:
        engine_opts: Keyword arguments of ``sglang.srt.server_args.ServerArgs``.

    Raises:
        EngineOutputError: Another in-process SGLang scheduler is live.
    """

    def __init__(self, engine_opts: dict[str, Any]) -> None:
        import sglang
        from sglang.srt.managers.scheduler import Scheduler
        from sglang.srt.runtime_context import SpawnRanks, publish
        from sglang.srt.server_args import PortArgs, ServerArgs

        check_version(sglang.__version__)
        self.lock = threading.RLock()
        with _LIVE_LOCK:
            if _LIVE:
                raise EngineOutputError(
                    "an in-process SGLang scheduler is already running in this process "
                    "(SGLang keeps one engine configuration per process); cleanup() the "
                    "other AsyncSGLTransformer first, share it (owns_engine=False), or "
                    "drive an SGLang server with AsyncSGLTransformer.from_url"
                )
            server_args = ServerArgs(**engine_opts)
            server_args.resolve_once()
            port_args = PortArgs.init_new(server_args)
            publish(server_args, role="scheduler", ranks=SpawnRanks(world_rank=0, gpu_id=0))
            with _no_watchdogs():
                scheduler = Scheduler(server_args, port_args)
            check_scheduler(scheduler)
            _LIVE.append(self)
        self.server_args = server_args
        self.scheduler = scheduler
        self.device = str(server_args.device)
        self.vocab_size = int(scheduler.model_config.vocab_size)
        self.max_input_len = int(scheduler.max_req_input_len)
        self.max_running_requests = int(scheduler.max_running_requests)
        self.lora_enabled = bool(server_args.enable_lora)
        _quiet_outputs(scheduler)
        self._params = _prefill_only_params(self.vocab_size)

    # -- requests ---------------------------------------------------------------------

    def add(self, prompts: Sequence[tuple[Sequence[int], str | None]]) -> list[str]:
        """Queue prefill-only requests ``(token_ids, lora_id)``; return their request ids."""
        from sglang.srt.managers.io_struct import TokenizedGenerateReqInput

        reqs = [
            TokenizedGenerateReqInput(
                input_text="",
                input_ids=array("q", token_ids),
                input_embeds=None,
                mm_inputs=None,
                token_type_ids=None,
                sampling_params=self._params,
                return_logprob=False,
                logprob_start_len=-1,
                top_logprobs_num=0,
                token_ids_logprob=None,
                stream=False,
                lora_id=lora_id,
                rid=f"genlm-{uuid.uuid4().hex}",
            )
            for token_ids, lora_id in prompts
        ]
        self.scheduler.process_input_requests(reqs)
        return [req.rid for req in reqs]

    def step(self) -> tuple[list[tuple[str, Any]], Any] | None:
        """Run the scheduler's next batch, or return None when it has nothing to run.

        Returns:
            ``(finished, logits)``: ``(row, request id, error)`` of every request that
            finished in this batch (``error`` is SGLang's abort message, or None), and
            the batch's ``(batch size, vocab)`` next-token logits.
        """
        import torch

        sched = self.scheduler
        plan = sched.get_next_batch_to_run(
            running_batch=sched.running_batch, last_batch=sched.last_batch
        )
        sched.running_batch = plan.running_batch
        batch = plan.batch_to_run
        sched.cur_batch_for_debug = batch
        if batch is None:
            sched.last_batch = None
            return None
        try:
            with torch.inference_mode():
                result = sched.run_batch(batch)
                sched.process_batch_result(batch, result)
        finally:
            sched.cur_batch_for_debug = None
        sched.last_batch = batch
        finished = [
            (i, req.rid, _abort_message(req.finished_reason))
            for i, req in enumerate(batch.reqs)
            if req.finished()
        ]
        return finished, result.logits_output.next_token_logits

    def abort(self, rids: Sequence[str]) -> None:
        """Drop queued or running requests (after a failure), best effort."""
        from sglang.srt.managers.io_struct import AbortReq

        for rid in rids:
            try:
                self.scheduler.abort_request(AbortReq(rid=rid))
            except Exception:  # noqa: BLE001 - the original error matters more
                pass

    def flush(self) -> bool:
        """Empty the radix prefix cache (and KV pools); False while requests are running."""
        return bool(self.scheduler.flush_cache())

    # -- LoRA -------------------------------------------------------------------------

    def load_lora(self, name: str, path: str) -> str:
        """Load a peft adapter; return its SGLang id (a new one every time).

        Raises:
            EngineOutputError: SGLang refused it (message included).
        """
        from sglang.srt.managers.io_struct import LoadLoRAAdapterReqInput

        lora_id = uuid.uuid4().hex
        result = self.scheduler.load_lora_adapter(
            LoadLoRAAdapterReqInput(lora_name=name, lora_path=str(path), lora_id=lora_id)
        )
        if not result.success:
            raise EngineOutputError(result.error_message or "no reason given")
        return lora_id

    def unload_lora(self, name: str, lora_id: str) -> None:
        """Unload an adapter loaded with [`load_lora`][]."""
        from sglang.srt.managers.io_struct import UnloadLoRAAdapterReqInput

        result = self.scheduler.unload_lora_adapter(
            UnloadLoRAAdapterReqInput(lora_name=name, lora_id=lora_id)
        )
        if not result.success:
            raise EngineOutputError(result.error_message or "no reason given")

    # -- lifecycle --------------------------------------------------------------------

    def shutdown(self) -> None:
        """Release the scheduler, its sockets and the process-wide distributed state."""
        from sglang.srt.distributed.parallel_state import (
            destroy_distributed_environment,
            destroy_model_parallel,
        )

        sched = self.__dict__.pop("scheduler", None)
        if sched is None:
            return
        try:
            for step in (
                lambda: sched.metrics_reporter._shutdown_fpm(),
                lambda: sched.async_d2h_worker and sched.async_d2h_worker.shutdown(),
                sched.release_host_resources,
                lambda: _close_sockets(sched),
                destroy_model_parallel,
                destroy_distributed_environment,
            ):
                try:
                    step()
                except Exception:  # noqa: BLE001 - release what can be released
                    pass
        finally:
            with _LIVE_LOCK:
                if self in _LIVE:
                    _LIVE.remove(self)


# -- helpers ---------------------------------------------------------------------------


def _prefill_only_params(vocab_size: int) -> Any:
    """SamplingParams of a request that is only prefilled (its next-token logits kept)."""
    from sglang.srt.sampling.sampling_params import SamplingParams

    params = SamplingParams(max_new_tokens=0, temperature=0.0)
    params.normalize(None)  # what SGLang's tokenizer manager does to every request
    params.verify(vocab_size)
    return params


def _abort_message(reason: Any) -> str | None:
    """SGLang's message when a request was aborted (``FINISH_ABORT``), else None."""
    if reason is None or type(reason).__name__ != "FINISH_ABORT":
        return None
    return str(getattr(reason, "message", None) or "aborted")


def _quiet_outputs(scheduler: Any) -> None:
    """Stop the scheduler sending outputs to a tokenizer/detokenizer process that is absent.

    Its ZMQ sockets would otherwise queue every request's output forever.
    """
    channels = scheduler.ipc_channels
    for name in ("send_to_tokenizer", "send_to_detokenizer"):
        wrapper = getattr(channels, name, None)
        if wrapper is not None and getattr(wrapper, "socket", None) is not None:
            wrapper.socket.close(linger=0)
            wrapper.socket = None


@contextlib.contextmanager
def _no_watchdogs() -> Iterator[None]:
    """Start the scheduler without SGLang's watchdog threads.

    Beside a scheduler process they SIGQUIT its parent when a forward stalls; in this
    process that parent would be the user's shell or test runner. SGLang gives no way
    to stop their (daemon) threads, which would keep the scheduler alive after cleanup.
    """
    from sglang.srt.managers import scheduler as module

    with _PATCH_LOCK:
        original = module.create_scheduler_watchdog
        module.create_scheduler_watchdog = _no_watchdog
        try:
            yield
        finally:
            module.create_scheduler_watchdog = original


def _no_watchdog(*args: Any, **kwargs: Any) -> None:
    return None


def _close_sockets(scheduler: Any) -> None:
    channels = scheduler.ipc_channels
    for name in ("recv_from_tokenizer", "recv_from_rpc", "send_metrics_from_scheduler"):
        sock = getattr(channels, name, None)
        if sock is not None and hasattr(sock, "close"):
            sock.close(linger=0)
