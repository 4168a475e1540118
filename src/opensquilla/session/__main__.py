"""``python -m opensquilla.session``: the same command line as ``opensquilla-session``."""

from __future__ import annotations

from .cli import main

main()
