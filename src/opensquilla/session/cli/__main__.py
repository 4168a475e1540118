"""``python -m opensquilla.session.cli``: the same command line as ``opensquilla-session``."""

from __future__ import annotations

from .app import main

main()
