"""``python -m ragjury ...``: the same as the ``ragjury`` console script."""

import sys

from ragjury.cli import main

sys.exit(main())
