"""``python -m fd_conformance.cli``: the console script without an installed entry point."""

from __future__ import annotations

import sys

from fd_conformance.cli import main

sys.exit(main())
