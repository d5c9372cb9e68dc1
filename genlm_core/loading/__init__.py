"""From a model name to a running backend: choosing it, resolving the name, the options.

[`load_model_by_name`][] picks and loads; [`resolve_model_name`][] turns a name into
what a backend loads; [`describe_options`][] lists a loader's options.
"""

from __future__ import annotations

from genlm_core.lm._options import accepted_options
from genlm_core.loading._load import list_backends, load_model_by_name, resolve_backend
from genlm_core.loading._model_names import cached_snapshot, embedded_model, resolve_model_name
from genlm_core.loading._options import (
    DTYPES,
    Option,
    check_dtype,
    describe_options,
    merge_engine_options,
)

__all__ = [
    "DTYPES",
    "Option",
    "accepted_options",
    "describe_options",
    "check_dtype",
    "cached_snapshot",
    "embedded_model",
    "list_backends",
    "load_model_by_name",
    "merge_engine_options",
    "resolve_backend",
    "resolve_model_name",
]
