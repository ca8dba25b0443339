"""``python -m llamabatch``: the ``llamabatch`` command."""

import sys

from .cli import main

sys.exit(main())
