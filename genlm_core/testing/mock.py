"""MockAsyncLM: a deterministic, offline language model over any real tokenizer.

Its next-token distribution is a pseudo-random function of the prompt (and of the
LoRA adapter's content), so results are reproducible across calls, processes and
batch shapes, while every request still goes through the real AutoBatcher and
OutputCache. Core tests and the conformance suite use it; it is also the built-in
``mock`` backend (never chosen automatically).

A row costs about a copy of itself: benchmarks run on the mock to measure the
library's own work, so the model must cost almost nothing. Drawing and normalising
fresh logits per request took 1-8 ms a row over a 128k-262k vocabulary (most of a
10 KB ``log_likelihood``); instead a few normalised base rows are drawn once per
temperature, and each request's row is one of them permuted by the request's seed
(`_fill`): every 1/8 of the vocabulary rotated by its own amount, written
straight into the row pool's memory. A permutation keeps the row's log-sum-exp
exactly (the same float32 values), and a rotation is two memory copies.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from genlm_core.compat import model_methods as _compat
from genlm_core.errors import GenlmError
from genlm_core.lm import BatchedAsyncLM, LoraAdapter, Request
from genlm_core.lm._requests import PrefixRequest, token_ids_key

__all__ = ["MockAsyncLM"]

#: Normalised base rows drawn per temperature (more for a tiny vocabulary, see
#: `_base_count`), and blocks of the vocabulary each rotated by its own amount.
BASE_ROWS = 8
BLOCKS = 8
#: The base rows' generator seed (the same in every process).
_BASE_SEED = 0x67656E6C6D  # b"genlm"
_MASK64 = (1 << 64) - 1

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
        temperature: Scale of the pseudo-random logits (standard normal ones divided by
            it); lower is peakier.
        **kwargs: Passed to [`BatchedAsyncLM`][genlm_core.lm.BatchedAsyncLM]
            (``batch_size``, ``max_wait``, ``cache_size``, ``vocab_size``, ...).

    Each row is a permutation of one of a few base rows, chosen by a 64-bit seed of
    the request (`_seed`: its token ids and its adapter's bytes). Two different
    requests get the same row only if their seeds choose the same base row and the
    same rotations: odds of 1 in ``bases x prod(block sizes)`` (about 2^43 for a
    256-token vocabulary, beyond the seed's own 2^64 from 4k tokens on), plus 2^-64
    that their seeds collide.

    Attributes:
        batches: The rows of each computed batch (one per request; one per prefix of
            a prefix call's sequences), oldest first, for tests and demos: the last
            [`recorded_batches`][] only, so a long-running program using the mock keeps
            a bounded list.
    """

    #: Most batch sizes [`batches`][] keeps (the oldest are dropped).
    recorded_batches: int = 1024
    # genlm-backend 0.3.1's methods, kept for its clients (see genlm_core.compat.model_methods).
    reset_async_queries = _compat.reset_async_queries
    set_lora = _compat.set_lora
    clear_lora = _compat.clear_lora

    def __init__(self, tokenizer: Any, *, temperature: float = 0.5, **kwargs: Any) -> None:
        super().__init__(tokenizer, **kwargs)
        self.temperature = temperature
        self.batches: list[int] = []  # the last recorded_batches batch sizes
        self._bases: tuple[float, np.ndarray] | None = None  # (temperature, rows)
        self._bases_lock = threading.Lock()

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
        """Pseudo-random normalised log-probs, one row per request, in the row pool's memory."""
        self._record(len(requests))
        bases = self.base_rows()
        rows = self.row_pool.empty_rows(len(requests))
        for row, req in zip(rows, requests, strict=True):
            seed = _seed(hash(token_ids_key(req.token_ids)), self.adapter_handle(req))
            _fill(row.numpy(), bases, seed)
            self.row_pool.note_maximum(row)  # while hot: the row check takes it
        return rows

    def compute_prefix_batch(self, requests: list[PrefixRequest]) -> list[Sequence[torch.Tensor]]:
        """The rows after every prefix of each sequence in one call, as genlm-hf's forward.

        Each equals [`compute_batch`][]'s row for that prefix; the prefixes' hashes come
        from one pass over the ids, so a long context's rows cost no copy of it each.
        """
        self._record(sum(len(r.token_ids) - r.start for r in requests))
        bases = self.base_rows()
        out = []
        for req in requests:
            adapter = self.adapter_handle(req)
            rows = self.row_pool.empty_rows(len(req.token_ids) - req.start)
            for row, hashed in zip(rows, req.prefix_hashes(), strict=True):
                _fill(row.numpy(), bases, _seed(hashed, adapter))
                self.row_pool.note_maximum(row)
            out.append(rows)
        return out

    def _record(self, size: int) -> None:
        batches = self.batches
        batches.append(size)
        if len(batches) > self.recorded_batches:
            del batches[: len(batches) - self.recorded_batches]

    def base_rows(self) -> np.ndarray:
        """The normalised rows every row is a permutation of, for the current temperature.

        ``log_softmax(z / temperature)`` of standard normal ``z``, float32, from a
        fixed seed: drawn once per temperature (tens of ms for a 262k vocabulary).
        """
        temperature = float(self.temperature)
        with self._bases_lock:
            if self._bases is None or self._bases[0] != temperature:
                n = len(self.byte_vocab)
                rng = np.random.default_rng(_BASE_SEED)
                z = rng.standard_normal((_base_count(n), n), dtype=np.float32) / temperature
                rows = torch.log_softmax(torch.from_numpy(z), dim=-1).numpy()
                rows.flags.writeable = False
                self._bases = (temperature, rows)
            return self._bases[1]

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


def _seed(hashed: int, adapter: bytes | None) -> int:
    """A 64-bit seed from the prompt's hash (and the adapter's bytes).

    The prompt's hash is its key's (`token_ids_key`: a tuple's, or a long prompt's
    own): the same in every process (ints are not salted) and kept by a long prompt's
    key, so a 250k-token context (a 1 MB text) costs the mock nothing again, not the 5
    ms of packing and digesting its bytes. The same ids give the same row whether they
    come as a key or as a plain tuple, by a next-token or a prefix request.
    """
    seed = hashed & 0xFFFF_FFFF_FFFF_FFFF
    if adapter is None:
        return seed
    digest = hashlib.blake2b(seed.to_bytes(8, "little"), digest_size=8)
    digest.update(b"\0lora\0" + adapter)
    return int.from_bytes(digest.digest(), "little")


def _base_count(n: int) -> int:
    """Base rows for an ``n``-token vocabulary: [`BASE_ROWS`][], more below 8k tokens.

    At least 64k values in all, so a tiny vocabulary still has many distinct rows.
    """
    return max(BASE_ROWS, -(-(1 << 16) // n))


def _mix(x: int) -> tuple[int, int]:
    """One step of splitmix64: the next state and a well-mixed 64-bit output."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    z = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x, z ^ (z >> 31)


def _fill(out: np.ndarray, bases: np.ndarray, seed: int) -> None:
    """Write the row of ``seed`` into ``out``: a base row, each block rotated.

    The seed picks the base row, then each of [`BLOCKS`][] equal parts of the
    vocabulary is rotated by an amount drawn from it: a permutation, so ``out`` holds
    the base row's values exactly (normalised as it is) in an order of the seed's.
    """
    state, pick = _mix(seed)
    base = bases[pick % len(bases)]
    n = len(out)
    lo = 0
    for j in range(1, BLOCKS + 1):
        hi = n * j // BLOCKS
        size = hi - lo
        if size:
            state, r = _mix(state)
            shift = r % size
            out[lo : hi - shift] = base[lo + shift : hi]
            out[hi - shift : hi] = base[lo : lo + shift]
        lo = hi


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
