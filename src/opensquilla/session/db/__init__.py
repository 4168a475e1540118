"""The storage layer's database half: schema, types, engine and units of work.

Only this package (``migrate.py`` included) and the Alembic scripts import SQLAlchemy and
Alembic; ``lint-imports`` checks it (pyproject.toml).
"""
