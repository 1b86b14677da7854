"""``python -m interlink`` runs the command line (see :mod:`interlink.cli.main`)."""

import sys

from .cli.main import main

if __name__ == "__main__":
    sys.exit(main())
