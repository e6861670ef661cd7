import sys

from proas.cli import run

sys.exit(run())
