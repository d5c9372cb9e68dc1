"""Shared fixtures of the genlm-mlx tests: mlx-lm models loaded once per session.

The tests need mlx and mlx-lm (``nox -s mlx`` installs them: ``mlx[cpu]`` on Linux);
without them every model test skips with that reason. ``genlm_mlx.lm`` is imported
before anything else touches ``mlx.core``, so on Linux it can put MKL's BLAS under
mlx (see ``genlm_mlx._blas``). Each test wraps the session's model in a fresh
``AsyncMlxLM`` (its caches, batcher and lifecycle are per test); tests that change
the model (LoRA) load their own copy.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

HAVE_MLX = all(importlib.util.find_spec(m) is not None for m in ("genlm_mlx", "mlx", "mlx_lm"))
MLX_REASON = "mlx and mlx-lm are not installed (nox -s mlx installs them)"

if HAVE_MLX:
    # Before any test module imports mlx (mlx_lm does): picks the BLAS, see genlm_mlx._blas.
    import genlm_mlx.lm  # noqa: F401

#: Asset name of each test model (genlm_assets).
MODELS = {
    "smollm2": "smollm2-135m-instruct",  # real Llama-architecture model, 135M
    "tiny-llama-spm": "tiny-llama-spm",  # Llama, SentencePiece vocabulary
    "tiny-llama3": "tiny-llama3",  # Llama, Llama-3 vocabulary (128k)
    "tiny-gpt2": "tiny-gpt2",  # GPT-2: absolute position embeddings
}


class Loaded:
    """An mlx-lm model with its tokenizer and decoded vocabulary."""

    def __init__(self, path: str) -> None:
        from genlm_mlx.lm import AsyncMlxLM

        probe = AsyncMlxLM.from_name(path, cache_size=0)
        self.path = path
        self.model = probe.model
        self.tokenizer = probe.tokenizer
        self.byte_vocab = (probe.byte_vocab, probe.str_vocab)
        probe.cleanup()  # drops the wrapper (its reference to the model), not the weights

    def lm(self, **opts: Any):
        """A fresh AsyncMlxLM around the shared model."""
        from genlm_mlx.lm import AsyncMlxLM

        return AsyncMlxLM(self.model, self.tokenizer, byte_vocab=self.byte_vocab, **opts)


@pytest.fixture(scope="session")
def mlx_models(asset_model_dir: Callable[[str], Any]) -> Callable[[str], Loaded]:
    """``mlx_models(key)``: the session's loaded model for a key of :data:`MODELS`."""
    if not HAVE_MLX:
        pytest.skip(MLX_REASON)
    loaded: dict[str, Loaded] = {}

    def get(key: str) -> Loaded:
        if key not in loaded:
            loaded[key] = Loaded(str(asset_model_dir(MODELS[key])))
        return loaded[key]

    return get
