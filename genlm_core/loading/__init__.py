"""From a model name to a running backend.

* :func:`load_model_by_name` picks the backend (named, or the best available one; see
  docs/plugins.md, "How load_model_by_name chooses"), checks the options it is given
  against that backend's, and loads the model.
* :func:`resolve_model_name` turns an embedded model's name, a local directory or a
  hub id into what a backend loads, failing at once where that cannot work.
* :func:`describe_options` lists the options a backend's loader takes, with defaults
  and descriptions (``genlm backends --options NAME``).
"""

from __future__ import annotations

from genlm_core.loading._load import list_backends, load_model_by_name, resolve_backend
from genlm_core.loading._model_names import cached_snapshot, embedded_model, resolve_model_name
from genlm_core.loading._options import (
    DTYPES,
    Option,
    accepted_options,
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
