"""Moved to [`genlm_assets`][] (users fetch the default model too, not only tests).

Kept so that ``genlm_core.testing.assets`` imports and
``python -m genlm_core.testing.assets fetch`` keep working.
"""

import sys

from genlm_assets import *  # noqa: F403
from genlm_assets import __all__  # noqa: F401

if __name__ == "__main__":
    from genlm_assets.cli import main

    sys.exit(main())
