"""MockAsyncLM: a deterministic, offline language model over any real tokenizer.

Its next-token distribution is a pseudo-random function of the prompt (and of the
LoRA adapter's content), so results are reproducible across calls, processes and
batch shapes, while every request still goes through the real AutoBatcher and
OutputCache. Core tests and the conformance suite use it; it is also the built-in
``mock`` backend (never chosen automatically).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from genlm_core.compat import model_methods as _compat
from genlm_core.errors import GenlmError
from genlm_core.lm import BatchedAsyncLM, LoraAdapter, Request

__all__ = ["MockAsyncLM"]

#: Names ``from_name`` accepts besides local directories: the project's test assets.
ASSET_ALIASES = {
    "gpt2": "gpt2-npm",
    "llama2": "llama2",
    "llama3": "llama3",
    "qwen3": "qwen3",
    "deepseek": "deepseek-v4",
    "gemma3": "gemma3",
    "mistral": "mistral-v1-spm",
    "cl100k": "cl100k",
    "o200k": "o200k",
}


class MockAsyncLM(BatchedAsyncLM):
    """A deterministic stand-in for a real model, batched like one.

    Args:
        tokenizer: Any Hugging Face tokenizer.
        temperature: Scale of the pseudo-random logits; lower is peakier.
        **kwargs: Passed to :class:`~genlm_core.lm.BatchedAsyncLM`
            (``batch_size``, ``max_wait``, ``cache_size``, ``vocab_size``, ...).

    Attributes:
        batches: The size of each computed batch, oldest first, for tests and demos:
            the last :attr:`recorded_batches` only, so a long-running program using the
            mock keeps a bounded list.
    """

    #: Most batch sizes :attr:`batches` keeps (the oldest are dropped).
    recorded_batches: int = 1024
    # genlm-backend 0.3.1's methods, kept for its clients (see genlm_core.compat.model_methods).
    reset_async_queries = _compat.reset_async_queries
    set_lora = _compat.set_lora
    clear_lora = _compat.clear_lora

    def __init__(self, tokenizer: Any, *, temperature: float = 0.5, **kwargs: Any) -> None:
        super().__init__(tokenizer, **kwargs)
        self.temperature = temperature
        self.batches: list[int] = []  # the last recorded_batches batch sizes

    @classmethod
    def from_name(cls, model_name: str, **opts: Any) -> MockAsyncLM:
        """Build a mock over a tokenizer.

        Args:
            model_name: ``"bytes"`` (the in-memory byte tokenizer), a local tokenizer
                directory, a test-asset alias (``"gpt2"``, ``"llama3"``, ...; fetched
                once into the asset cache), an embedded model's name, or a hub name
                (needs the hub; fails at once when it is unreachable).
            **opts: Passed to the constructor.
        """
        return cls(_load_tokenizer(model_name), **opts)

    def compute_batch(self, requests: list[Request]) -> Sequence[torch.Tensor]:
        """Pseudo-random normalised log-probs, one row per request."""
        batches = self.batches
        batches.append(len(requests))
        if len(batches) > self.recorded_batches:
            del batches[: len(batches) - self.recorded_batches]
        n = len(self.byte_vocab)
        rows = np.empty((len(requests), n), dtype=np.float32)
        for i, req in enumerate(requests):
            rng = np.random.default_rng(_seed(req, self.adapter_handle(req)))
            rows[i] = rng.standard_normal(n, dtype=np.float32) / self.temperature
        logprobs = torch.log_softmax(torch.from_numpy(rows), dim=-1)
        return self.row_pool.copy_rows(logprobs)  # one row each, in recycled memory

    def load_adapter(self, adapter: LoraAdapter) -> bytes:
        """A fake adapter: its file's bytes (or a folder's files) perturb the distribution.

        Two versions of an adapter (files with other content) give other rows, as real
        adapters would.

        Raises:
            FileNotFoundError: No file or folder at ``adapter.path``.
        """
        path = Path(adapter.path)
        if path.is_file():
            return path.read_bytes()
        if path.is_dir():
            files = sorted(f for f in path.rglob("*") if f.is_file())
            return b"".join(f.name.encode() + b"\0" + f.read_bytes() for f in files)
        raise FileNotFoundError(
            f"mock LoRA adapter {adapter.name!r}: no file or folder at {adapter.path!r}; pass "
            f"an existing path (its bytes stand for the adapter's weights)"
        )


def _seed(req: Request, adapter: bytes | None) -> int:
    """A 64-bit seed from the prompt (and the adapter's bytes).

    The prompt's part is Python's hash of its tuple of ints: the same in every process
    (ints and tuples of them are not salted) and a C loop, ~1.5 ns a token, so a
    250k-token context (a 1 MB text) costs the mock 0.4 ms, not the 5 ms of packing
    and digesting its bytes.
    """
    seed = hash(req.token_ids) & 0xFFFF_FFFF_FFFF_FFFF
    if adapter is None:
        return seed
    digest = hashlib.blake2b(seed.to_bytes(8, "little"), digest_size=8)
    digest.update(b"\0lora\0" + adapter)
    return int.from_bytes(digest.digest(), "little")


def _load_tokenizer(model_name: str) -> Any:
    if model_name == "bytes":
        from genlm_core.testing.byte_tokenizer import ByteTokenizer

        return ByteTokenizer()
    from transformers import AutoTokenizer

    path = Path(model_name).expanduser()
    if path.is_dir():
        return AutoTokenizer.from_pretrained(path)
    if model_name in ASSET_ALIASES:
        from genlm_assets import tokenizer_dir

        return AutoTokenizer.from_pretrained(tokenizer_dir(ASSET_ALIASES[model_name]))
    from genlm_core.loading import cached_snapshot, resolve_model_name

    name = resolve_model_name(model_name)  # an embedded model; no such directory; hub checks
    if not Path(name).is_dir():
        # A cached hub id loads from its snapshot: offline, AutoTokenizer asks the hub
        # cache for config.json, which a tokenizer-only repository lacks.
        name = cached_snapshot(name) or name
    try:
        return AutoTokenizer.from_pretrained(name)
    except Exception as exc:
        raise MockTokenizerError(
            f"mock backend: cannot load a tokenizer for {model_name!r} ({type(exc).__name__}: "
            f"{exc}). Pass a local tokenizer directory, 'bytes', or one of: "
            f"{', '.join(sorted(ASSET_ALIASES))}"
        ) from exc


class MockTokenizerError(GenlmError, ValueError):
    """The mock backend could not find a tokenizer for the requested name."""
