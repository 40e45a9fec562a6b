"""``python -m symgrad`` is the ``symgrad`` command."""

import sys

from symgrad.cli import main

sys.exit(main())
