"""The storage layer's database half: schema, types, engine and units of work.

Only this package, ``storage.py``, ``migrate.py`` and the Alembic scripts import SQLAlchemy.
"""
