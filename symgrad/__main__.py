"""``python -m symgrad`` is the ``symgrad`` command."""
import sys

from .cli import main

sys.exit(main())
