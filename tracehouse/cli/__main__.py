"""``python -m tracehouse.cli``: the ``tracehouse`` command, as the console script runs it."""

from __future__ import annotations

import sys

from .main import console_main

sys.exit(console_main())
