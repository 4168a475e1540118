"""PostgreSQL test databases, reused instead of created and dropped for every test.

``CREATE DATABASE ... TEMPLATE`` costs 35-80 ms and ``DROP DATABASE`` 10-550 ms (it waits for
a checkpoint), against 1-3 ms to put a used database back the way it was handed out. So each
pytest process keeps two pools of its own databases:

* **migrated**: at the Alembic head, every table empty but the version tables. When a test
  gives one back, the pool compares a fingerprint of its whole schema (tables, columns,
  indexes, constraints, triggers, functions, extensions, sequences, privileges, database
  settings) and of the version tables' rows with the template's. Equal: the rows are deleted
  and the id sequences set back (triggers off, one round trip), and the database is handed
  out again. A test that migrated, downgraded, dropped an index or granted a role changed the
  fingerprint, so its database is scrubbed (every schema of ours dropped) and, once it
  fingerprints as empty, joins the other pool.
* **empty**: no schema of ours at all. A test that brought one to head exactly gives back a
  database the migrated pool can take.

A database that still has a connection on it when its test ends (a leaked engine), or that
fingerprints as neither, is dropped ``WITH (FORCE)`` as before. Every database of the pools,
and the template, are dropped when the process ends.

Databases get ``synchronous_commit = off``: a commit returns before the server flushes its
WAL. No test kills the server; a killed *client* loses nothing by it. Tests marked
``durable`` get a database with the server's default instead (``durable=True`` here).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from dataclasses import dataclass, field

import asyncpg

FAST_COMMIT = "ALTER DATABASE {name} SET synchronous_commit = off"

# Every schema but the server's own (and temporary ones, which die with their session).
_OURS = (
    "SELECT oid, nspname FROM pg_namespace WHERE nspname NOT IN "
    "('pg_catalog', 'information_schema', 'pg_toast') "
    "AND nspname NOT LIKE 'pg_temp_%' AND nspname NOT LIKE 'pg_toast_temp_%'"
)

SCHEMA_FINGERPRINT = f"""
WITH ns AS ({_OURS})
SELECT md5(coalesce(string_agg(item, E'\\n' ORDER BY item), '')) FROM (
  SELECT 'n ' || nspname || ' ' || pg_get_userbyid(nspowner) || ' ' || coalesce(nspacl::text, '')
    FROM pg_namespace WHERE oid IN (SELECT oid FROM ns)
  UNION ALL
  SELECT 'c ' || n.nspname || '.' || c.relname || ' ' || c.relkind::text
         || ' ' || c.relpersistence::text || ' ' || coalesce(c.relacl::text, '')
         || ' ' || coalesce(c.reloptions::text, '')
         || ' ' || c.relrowsecurity
    FROM pg_class c JOIN ns n ON n.oid = c.relnamespace
  UNION ALL
  SELECT 'a ' || c.oid::regclass::text || '.' || a.attname || ' '
         || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull
         || ' ' || a.attgenerated::text
         || ' ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN ns n ON n.oid = c.relnamespace
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE a.attnum > 0 AND NOT a.attisdropped
  UNION ALL
  SELECT 'i ' || pg_get_indexdef(i.indexrelid) || ' ' || i.indisvalid || ' ' || i.indisready
    FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN ns n ON n.oid = c.relnamespace
  UNION ALL
  SELECT 'k ' || k.conrelid::regclass::text || ' ' || k.conname || ' '
         || pg_get_constraintdef(k.oid) || ' ' || k.convalidated
    FROM pg_constraint k JOIN ns n ON n.oid = k.connamespace
  UNION ALL
  SELECT 't ' || pg_get_triggerdef(t.oid) || ' ' || t.tgenabled::text
    FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN ns n ON n.oid = c.relnamespace
    WHERE NOT t.tgisinternal
  UNION ALL
  SELECT 'f ' || p.oid::regprocedure::text || ' ' || md5(coalesce(p.prosrc, ''))
         || ' ' || coalesce(p.proconfig::text, '') || ' ' || coalesce(p.proacl::text, '')
    FROM pg_proc p JOIN ns n ON n.oid = p.pronamespace
  UNION ALL
  SELECT 'v ' || c.oid::regclass::text || ' ' || md5(pg_get_viewdef(c.oid))
    FROM pg_class c JOIN ns n ON n.oid = c.relnamespace WHERE c.relkind IN ('v', 'm')
  UNION ALL
  SELECT 'y ' || n.nspname || '.' || t.typname || ' ' || t.typtype::text
    FROM pg_type t JOIN ns n ON n.oid = t.typnamespace WHERE t.typtype IN ('d', 'e', 'r', 'm')
  UNION ALL
  SELECT 'q ' || s.seqrelid::regclass::text || ' ' || s.seqstart || ' ' || s.seqincrement
    FROM pg_sequence s
  UNION ALL
  SELECT 'p ' || pol.polrelid::regclass::text || ' ' || pol.polname FROM pg_policy pol
  UNION ALL
  SELECT 'e ' || extname || ' ' || extversion FROM pg_extension
  UNION ALL
  SELECT 's ' || coalesce(pg_get_userbyid(setrole), '') || ' ' || array_to_string(setconfig, ',')
    FROM pg_db_role_setting
    WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
  UNION ALL
  SELECT 'd ' || coalesce(datacl::text, '') || ' ' || datallowconn || ' ' || datconnlimit
    FROM pg_database WHERE datname = current_database()
) AS items(item)
"""

# Every catalog the fingerprint reads, as (rows, newest row version): a DDL statement, a
# grant or an ALTER DATABASE inserts, updates or deletes rows there, which changes the count
# or brings a newer xmin (transaction ids only grow). Equal to what it was when the database
# last fingerprinted clean: nothing changed its schema since, and the fingerprint (three to
# six times the cost) is not needed. Different: the fingerprint decides, as before.
_SIGNED_CATALOGS = (
    "pg_namespace",
    "pg_class",
    "pg_attribute",
    "pg_attrdef",
    "pg_index",
    "pg_constraint",
    "pg_trigger",
    "pg_proc",
    "pg_type",
    "pg_sequence",
    "pg_policy",
    "pg_extension",
)
_THIS_DATABASE = "(SELECT oid FROM pg_database WHERE datname = current_database())"
CATALOG_SIGNATURE = (
    "SELECT concat_ws(' ', "
    + ", ".join(
        [
            *(
                f"(SELECT count(*) || ':' || coalesce(max(xmin::text::bigint), 0) FROM {catalog})"
                for catalog in _SIGNED_CATALOGS
            ),
            "(SELECT count(*) || ':' || coalesce(max(xmin::text::bigint), 0) "
            f"FROM pg_db_role_setting WHERE setdatabase = {_THIS_DATABASE})",
            f"(SELECT xmin::text FROM pg_database WHERE oid = {_THIS_DATABASE})",
        ]
    )
    + ")"
)

OTHER_CONNECTIONS = (
    "SELECT count(*) FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
)


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass
class _Layout:
    """What a clean migrated database holds, read off the first one."""

    schema: str  # SCHEMA_FINGERPRINT of a migrated database
    static: str  # the rows of the tables the migrations fill (the version tables)
    static_sql: str  # the query giving ``static``
    reset_sql: str  # empties every other table and sets every sequence back
    empty: str  # SCHEMA_FINGERPRINT of an empty database


@dataclass
class PostgresDatabases:
    """The pools of one pytest process (an xdist worker has its own)."""

    admin_dsn: str  # a libpq URL of the server's maintenance database
    prefix: str = field(
        default_factory=lambda: (
            f"osq_t_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}_" + uuid.uuid4().hex[:6] + "_"
        )
    )
    template: str | None = None
    layout: _Layout | None = None
    migrated: list[str] = field(default_factory=list)
    # CATALOG_SIGNATURE of each migrated-pool database when it last fingerprinted clean.
    signatures: dict[str, str] = field(default_factory=dict)
    empty: list[str] = field(default_factory=list)
    created: set[str] = field(default_factory=set)
    stats: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            ("created", "reused", "reset", "signed", "scrubbed", "dropped"), 0
        )
    )

    def dsn(self, database: str) -> str:
        base, _, _ = self.admin_dsn.rpartition("/")
        return f"{base}/{database}"

    async def _admin(self) -> asyncpg.Connection:
        return await asyncpg.connect(self.admin_dsn)

    async def _create(self, template: str | None, *, fast: bool) -> str:
        name = self.prefix + uuid.uuid4().hex[:12]
        conn = await self._admin()
        try:
            clause = f" TEMPLATE {_ident(template)}" if template else ""
            await conn.execute(f"CREATE DATABASE {_ident(name)}{clause}")
            if fast:
                await conn.execute(FAST_COMMIT.format(name=_ident(name)))
        finally:
            await conn.close()
        self.created.add(name)
        self.stats["created"] += 1
        return name

    async def drop(self, name: str) -> None:
        conn = await self._admin()
        try:
            await conn.execute(f"DROP DATABASE IF EXISTS {_ident(name)} WITH (FORCE)")
        finally:
            await conn.close()
        self.created.discard(name)
        self.stats["dropped"] += 1

    # -- the template and the layout of a clean database ------------------------------------

    async def set_template(self, template: str) -> None:
        """``template`` is migrated to head; learn what a clean copy of it looks like."""
        self.template = template
        self.created.add(template)
        empty = await self._create(None, fast=True)
        first = await self._create(template, fast=True)
        conn = await asyncpg.connect(self.dsn(empty))
        try:
            empty_print = await conn.fetchval(SCHEMA_FINGERPRINT)
        finally:
            await conn.close()
        conn = await asyncpg.connect(self.dsn(first))
        try:
            tables = await conn.fetch(
                f"WITH ns AS ({_OURS}) SELECT format('%I.%I', n.nspname, c.relname) AS name "
                "FROM pg_class c JOIN ns n ON n.oid = c.relnamespace "
                "WHERE c.relkind IN ('r', 'p') ORDER BY 1"
            )
            static, emptied = [], []
            for row in tables:
                filled = await conn.fetchval(f"SELECT EXISTS (SELECT FROM {row['name']})")
                (static if filled else emptied).append(row["name"])
            sequences = await conn.fetch(
                "SELECT s.seqrelid::regclass::text AS name, s.seqstart AS start FROM pg_sequence s"
            )
            static_sql = "SELECT " + (
                " || ".join(
                    f"(SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY t::text), '')) "
                    f"FROM {name} t)"
                    for name in static
                )
                or "''"
            )
            reset_sql = "".join(
                [
                    "BEGIN; SET LOCAL session_replication_role = replica; ",
                    *(f"DELETE FROM {name}; " for name in emptied),
                    *(f"SELECT setval('{s['name']}', {s['start']}, false); " for s in sequences),
                    "COMMIT;",
                ]
            )
            self.layout = _Layout(
                schema=await conn.fetchval(SCHEMA_FINGERPRINT),
                static=await conn.fetchval(static_sql),
                static_sql=static_sql,
                reset_sql=reset_sql,
                empty=empty_print,
            )
        finally:
            await conn.close()
        self.migrated.append(first)
        self.empty.append(empty)

    # -- handing out and taking back ----------------------------------------------------------

    async def take(self, *, migrated: bool, durable: bool = False) -> str:
        """A database at head (``migrated``) or without any schema of ours. ``durable``: a
        new one with the server's own ``synchronous_commit``, dropped after use."""
        if durable:
            return await self._create(self.template if migrated else None, fast=False)
        pool = self.migrated if migrated else self.empty
        if pool:
            self.stats["reused"] += 1
            return pool.pop()
        return await self._create(self.template if migrated else None, fast=True)

    async def give_back(self, name: str, *, durable: bool = False) -> None:
        """Put ``name`` back into the pool it now fits, or drop it."""
        if durable:
            await self.drop(name)
            return
        try:
            pool = await self._sort(name)
        except (OSError, asyncpg.PostgresError):
            pool = None
        if pool is None:
            await self.drop(name)
        else:
            pool.append(name)

    async def _sort(self, name: str) -> list[str] | None:
        layout = self.layout
        assert layout is not None
        conn = await asyncpg.connect(self.dsn(name))
        try:
            if await conn.fetchval(OTHER_CONNECTIONS):
                return None  # a leaked connection: only a forced drop is safe
            signature = await conn.fetchval(CATALOG_SIGNATURE)
            unchanged = self.signatures.pop(name, None) == signature
            schema = layout.schema if unchanged else await conn.fetchval(SCHEMA_FINGERPRINT)
            if schema == layout.schema and await conn.fetchval(layout.static_sql) == layout.static:
                await conn.execute(layout.reset_sql)
                self.signatures[name] = signature
                self.stats["reset"] += 1
                self.stats["signed"] += unchanged
                return self.migrated
            if schema != layout.empty:
                await self._scrub(conn)
                self.stats["scrubbed"] += 1
                if await conn.fetchval(SCHEMA_FINGERPRINT) != layout.empty:
                    return None
            return self.empty
        finally:
            await conn.close()

    @staticmethod
    async def _scrub(conn: asyncpg.Connection) -> None:
        """Drop every schema of ours and make ``public`` as a new database has it."""
        schemas = [row["nspname"] for row in await conn.fetch(_OURS)]
        script = ["BEGIN;"]
        script += [f"DROP SCHEMA {_ident(schema)} CASCADE;" for schema in schemas]
        script += [
            "CREATE SCHEMA public AUTHORIZATION pg_database_owner;",
            "GRANT USAGE ON SCHEMA public TO PUBLIC;",
            "COMMENT ON SCHEMA public IS 'standard public schema';",
            "COMMIT;",
        ]
        await conn.execute(" ".join(script))

    async def close(self) -> None:
        """Drop every database of this process. Together, not one by one: each drop waits
        for a checkpoint, and drops that wait at once share one."""
        await asyncio.gather(*(self.drop(name) for name in sorted(self.created)))
        self.migrated.clear()
        self.empty.clear()
