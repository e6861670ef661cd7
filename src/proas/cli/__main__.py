"""``python -m proas.cli``: the ``proas`` command (as ``python -m proas``)."""

import sys

from proas.cli import run

sys.exit(run())
