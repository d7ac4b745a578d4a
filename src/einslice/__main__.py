"""``python -m einslice``: the same command line as the ``einslice`` script."""

import sys

from ._cli import main

sys.exit(main())
