"""``python -m proas.cli``: the ``proas`` command (as ``python -m proas``)."""

import sys

from proas.cli import main

sys.exit(main())
