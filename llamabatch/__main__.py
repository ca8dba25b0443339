"""``python -m llamabatch``: the ``llamabatch`` command."""

import sys

from .cli.main import main

status = main()
# A KeyboardInterrupt that ended code run by exec() or eval() of a string (dataclasses and
# namedtuple make their methods so) leaves CPython's "unhandled interrupt" flag set even
# once the command caught it; under -m the process would then die by SIGINT instead of
# exiting with ``status``. Running a string clears that flag first (CPython 3.10-3.13).
exec("")
sys.exit(status)
