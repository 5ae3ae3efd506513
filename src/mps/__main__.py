"""``python -m mps``: the same as the ``mps-control-daemon`` command."""

from __future__ import annotations

import sys

from mps.cli import main

sys.exit(main())
