"""genlm-backend's ``genlm.backend.cache`` path: see :mod:`genlm_core.compat.genlm_backend`."""

from genlm_core.compat.genlm_backend import OutputCache as OutputCache

__all__ = ["OutputCache"]
