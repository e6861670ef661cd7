import sys
from pathlib import Path

# shared test helpers (tests/credit_helpers.py) importable as plain modules
sys.path.insert(0, str(Path(__file__).parent))
