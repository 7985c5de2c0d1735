"""Run ragjury from a checkout: ``python main.py generate docs/ --out dataset.jsonl``."""

import sys

from ragjury.cli import main

if __name__ == "__main__":
    sys.exit(main())
