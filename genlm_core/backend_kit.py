"""``genlm_core.backend_kit``: the old import path of [`genlm_backend_kit`][].

What the official backends share ships as its own distribution, genlm-backend-kit;
code that imports it from here keeps working when that is installed.
"""

from __future__ import annotations

import importlib
import sys

try:
    sys.modules[__name__] = importlib.import_module("genlm_backend_kit")
except ModuleNotFoundError as error:
    if error.name != "genlm_backend_kit":
        raise
    raise ModuleNotFoundError(
        f"{__name__} is genlm-backend-kit now, its own distribution: pip install "
        f"genlm-backend-kit (from a checkout: pip install -e plugins/genlm_backend_kit)",
        name=__name__,
    ) from None
