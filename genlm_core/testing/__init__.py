"""Testing helpers shipped in the wheel, for genlm-core and for plugin authors.

* :class:`MockAsyncLM`: deterministic offline model (also the ``mock`` backend).
* :func:`ByteTokenizer`: a real 257-token byte-level tokenizer built in memory.
* :class:`AsyncLMConformance`: the standard test suite every backend subclasses;
  :class:`LoraConformance`: the suite for backends that load LoRA adapters.
* ``genlm_core.testing.pytest_plugin``: markers and fixtures; opt in with
  ``pytest_plugins = ["genlm_core.testing.pytest_plugin"]`` in a root conftest.
* ``genlm_assets``: registry-sourced tokenizers and tiny models.

Names load lazily so importing this package does not import pytest.
"""

from __future__ import annotations

from genlm_core._lazy import lazy_exports

_EXPORTS = {
    "MockAsyncLM": "genlm_core.testing.mock",
    "ByteTokenizer": "genlm_core.testing.byte_tokenizer",
    "AsyncLMConformance": "genlm_core.testing.conformance",
    "LoraConformance": "genlm_core.testing.conformance",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
