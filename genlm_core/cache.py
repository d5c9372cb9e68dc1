"""genlm-backend's ``genlm.backend.cache`` path: [`OutputCache`][genlm_core.runtime.OutputCache]."""

from genlm_core.runtime import OutputCache

__all__ = ["OutputCache"]
