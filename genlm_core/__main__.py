"""``python -m genlm_core``: the ``genlm`` command line."""

import sys

from genlm_core.cli import main

sys.exit(main())
