"""The asset tokenizers, loaded once per test process (tests/core and tests/bytelm share it).

Loading a real tokenizer takes 0.5-2 s; what :func:`asset_tokenizer` returns is shared
between tests: never mutate it.
"""

from __future__ import annotations

import functools
from typing import Any


@functools.cache
def asset_tokenizer(name: str) -> Any:
    """The asset tokenizer ``name`` (``genlm_assets.tokenizer_dir``), offline."""
    from transformers import AutoTokenizer

    from genlm_assets import tokenizer_dir

    return AutoTokenizer.from_pretrained(tokenizer_dir(name), local_files_only=True)
