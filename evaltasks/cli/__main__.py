"""``python -m evaltasks.cli``: the same as the ``evaltasks`` command."""

import sys

from evaltasks.cli import main

if __name__ == "__main__":  # importing the module (a walk over the package's modules) runs nothing
    sys.exit(main())
