"""Testing helpers shipped in the wheel, for genlm-core and for plugin authors.

* [`MockAsyncLM`][]: deterministic offline model (also the ``mock`` backend).
* [`ByteTokenizer`][]: a real 257-token byte-level tokenizer built in memory.
* [`AsyncLMConformance`][]: the standard test suite every backend subclasses;
  [`LoraConformance`][]: the suite for backends that load LoRA adapters.
* ``genlm_core.testing.pytest_plugin``: markers and fixtures; opt in with
  ``pytest_plugins = ["genlm_core.testing.pytest_plugin"]`` in a root conftest.
* ``genlm_assets``: registry-sourced tokenizers and tiny models.

Names load lazily so importing this package does not import pytest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from genlm_core.lazy import lazy_exports

__all__ = ["AsyncLMConformance", "ByteTokenizer", "LoraConformance", "MockAsyncLM"]

__getattr__, __dir__ = lazy_exports(globals())

if TYPE_CHECKING:  # pragma: no cover
    from genlm_core.testing.byte_tokenizer import ByteTokenizer
    from genlm_core.testing.conformance import AsyncLMConformance, LoraConformance
    from genlm_core.testing.mock import MockAsyncLM
