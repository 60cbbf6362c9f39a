"""``python -m icefloe.cli ...``: the same as the ``icefloe`` console script."""

import sys

from icefloe.cli import main

sys.exit(main())
