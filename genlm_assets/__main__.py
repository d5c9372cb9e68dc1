"""``python -m genlm_assets list|fetch|path``."""

import sys

from genlm_assets.cli import main

sys.exit(main())
