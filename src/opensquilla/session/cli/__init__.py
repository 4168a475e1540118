"""``opensquilla-session``: the operator's command line.

A thin layer: it parses options, calls the manager (sessions, operations, repair, stats),
``transfer`` (export, import, copy), the schema tasks of ``usecases.overview`` (``db ...``,
which must open a database without migrating it) or the demo script, and prints the result
(rich text for people, ``--json`` for scripts). The DSN is ``--dsn``, else
``$OPENSQUILLA_SESSION_DSN``, else the embedded default file. A command that only reads
(every ``--dry-run`` too) opens the database with ``create=False``: a missing SQLite file is
an error, and nothing is created.

Exit codes: 0 done; 1 an error (one line on stderr, never a traceback or a password);
2 a check that found a problem (``db check``, ``copy`` conflicts or verification) or a
usage error (an unknown option, a value out of its range); 130 interrupted.

Stored text is shown, never obeyed: rich markup in it is escaped, and control characters
(ESC sequences, carriage returns, bells, bidirectional overrides...) are shown as ``\\x1b``
-style escapes. ``--json`` output is strict JSON: non-finite floats are the strings
``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` (as in the export format), control characters
are ``\\u`` escapes, and values nested as deeply as the store accepts are written like any
other (the encoder is iterative).

Layout: ``app`` wires the commands; ``options`` declares the shared options once;
``runtime`` runs a command (DSN, event loop, errors to exit codes, ``-v`` logging);
``render`` prints every result; ``db``, ``sessions``, ``operations``, ``repair``,
``transfer``, ``stats`` and ``demo`` hold the commands and their calls into the library.
"""

from __future__ import annotations

from .app import app, main

__all__ = ["app", "main"]
