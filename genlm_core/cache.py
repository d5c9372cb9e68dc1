"""genlm-backend's ``genlm.backend.cache`` path for :class:`OutputCache` (genlm_core.runtime)."""

from __future__ import annotations

from genlm_core.runtime._cache import OutputCache

__all__ = ["OutputCache"]
