import sys

from proas.cli import main

sys.exit(main())
