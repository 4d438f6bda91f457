"""The dependency discriminator's defaults that a command line needs without loading torch
(``models/discriminator.py`` uses and re-exports them)."""
from __future__ import annotations

DEFAULT_MAX_LENGTH = 96  # evidence + signature lines of both docs and the start of their descriptions
