"""``python -m llamabatch``: the ``llamabatch`` command."""

import sys

from .cli.main import main

sys.exit(main())
