"""``python -m genlm_core.assets list|fetch|path``."""

import sys

from genlm_core.assets.cli import main

sys.exit(main())
