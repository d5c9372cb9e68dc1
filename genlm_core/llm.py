"""genlm-backend's ``genlm.backend.llm`` path: the code is [`genlm_core.compat.genlm_backend`][].

Names resolve on first use (PEP 562), so importing this module imports no plugin.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from genlm_core.compat.genlm_backend import llm_name
from genlm_core.compat.genlm_backend import placeholder as placeholder  # tests build one
from genlm_core.lazy import lazy_exports

__all__ = [
    "AsyncLM",
    "AsyncMlxLM",
    "AsyncSGLTransformer",
    "AsyncTransformer",
    "AsyncVirtualLM",
    "MockAsyncLM",
    "load_model_by_name",
]

__getattr__, __dir__ = lazy_exports(globals(), functools.partial(llm_name, module=__name__))


if TYPE_CHECKING:  # pragma: no cover
    from genlm_core.lm import AsyncLM
    from genlm_core.loading import load_model_by_name
    from genlm_core.testing.mock import MockAsyncLM
    from genlm_hf.lm import AsyncTransformer
    from genlm_mlx.lm import AsyncMlxLM
    from genlm_sgl.lm import AsyncSGLTransformer
    from genlm_vllm.lm import AsyncVirtualLM
