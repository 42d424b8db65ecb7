"""``python -m club3090``: the same command as the ``club3090`` script."""

import sys

from club3090.cli import main

sys.exit(main())
