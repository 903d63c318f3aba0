"""``python -m evaltasks.cli``: the same as the ``evaltasks`` command."""

import sys

from evaltasks.cli import main

sys.exit(main())
