"""Engine and pool options, and PostgreSQL URL parameters, checked before anything opens.

``SessionStorage(target, **options)`` takes SQLAlchemy's usual engine and pool options
(:class:`EngineOptions`). An unknown option, or a value outside its domain, is a
``ConfigurationError`` naming it, never a ``TypeError`` from deep inside the pool.

Rules by backend:

* PostgreSQL: every option applies. ``pool_pre_ping=True`` (the default) is the store's own
  one-round-trip ping on the checkout of a connection idle for a second or more, and a
  check of its socket on every checkout; ``False`` turns both off. ``connect_args`` go to
  ``asyncpg.connect()`` and win over the URL's parameters; their ``server_settings`` are
  merged with the URL's.
* A SQLite file: the pool options apply to its pool; ``connect_args`` is refused (the store
  sets its connections up itself).
* ``:memory:``: one connection for the store's whole life and no pool, so every pool option
  and ``connect_args`` are refused.

URL query parameters on PostgreSQL are given to asyncpg with their types (a URL carries
only text): server settings (``application_name``, ``search_path``, ``statement_timeout``,
...) become asyncpg's ``server_settings``; libpq's ``sslmode`` and ``connect_timeout`` are
asyncpg's ``ssl`` and ``timeout``; an unknown parameter is refused by name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Annotated, Any, TypedDict, get_type_hints

from pydantic import AfterValidator, BeforeValidator, ValidationInfo, create_model, model_validator
from sqlalchemy.engine import URL

from ..errors import ConfigurationError
from ..support.settings import Settings


def _checked(check: Callable[[str, Any], Any]) -> BeforeValidator:
    """The check of one option, run by pydantic on the value given (before its type)."""

    def run(value: object, info: ValidationInfo) -> object:
        assert info.field_name is not None
        return check(info.field_name, value)

    return BeforeValidator(run)


def _flag(name: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
        return value.lower() in ("true", "1", "yes")
    raise ConfigurationError(f"{name} must be True or False, not {type(value).__name__}")


def _number(name: str, value: object, *, integer: bool, minimum: float) -> float:
    """``value`` (a number, or its text from a URL) as a number at least ``minimum``."""
    number: float | None = None
    if isinstance(value, str):
        try:
            number = int(value) if integer else float(value)
        except ValueError:
            number = None
    elif isinstance(value, int | float) and not isinstance(value, bool):
        number = value
    if (
        number is None
        or (integer and not isinstance(number, int))
        or not math.isfinite(number)
        or number < minimum
    ):
        kind = "an integer" if integer else "a number"
        raise ConfigurationError(f"{name} must be {kind} >= {minimum:g}, not {value!r}"[:200])
    return number


def _seconds(name: str, value: object) -> float:
    return _number(name, value, integer=False, minimum=0)


def _count(name: str, value: object) -> int:
    return int(_number(name, value, integer=True, minimum=0))


def _pool_size(name: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{name} must be a positive integer or None, not {value!r}"[:200])
    return value


def _max_overflow(name: str, value: object) -> int:
    return int(_number(f"{name} (-1: no limit)", value, integer=True, minimum=-1))


def _recycle(name: str, value: object) -> float:
    if value == -1 and not isinstance(value, bool):
        return -1
    return _number(f"{name} (seconds, or -1: never)", value, integer=False, minimum=0)


def _bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ConfigurationError(f"{name} must be True or False, not {type(value).__name__}")
    return value


def _mapping(name: str, value: object) -> dict[str, Any]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ConfigurationError(f"{name} must be a mapping of names to values")
    return dict(value)  # a copy (made read-only once it is checked)


class EngineOptions(TypedDict, total=False):
    """The engine and pool options ``SessionStorage`` accepts (SQLAlchemy's meanings),
    declared once: each with its type and its check; :class:`EngineSettings`' fields are
    made from these."""

    pool_size: Annotated[int | None, _checked(_pool_size)]
    max_overflow: Annotated[int, _checked(_max_overflow)]
    pool_timeout: Annotated[float, _checked(_seconds)]
    pool_recycle: Annotated[float, _checked(_recycle)]
    pool_pre_ping: Annotated[bool, _checked(_bool)]
    pool_use_lifo: Annotated[bool, _checked(_bool)]
    echo: Annotated[bool, _checked(_bool)]
    echo_pool: Annotated[bool, _checked(_bool)]
    # Kept as a read-only copy: the settings are frozen.
    connect_args: Annotated[Mapping[str, Any], _checked(_mapping), AfterValidator(MappingProxyType)]


_POOL_OPTIONS = (
    "pool_size",
    "max_overflow",
    "pool_timeout",
    "pool_recycle",
    "pool_pre_ping",
    "pool_use_lifo",
)
_SET_BY_THE_STORE = (
    "poolclass",
    "pool",
    "creator",
    "module",
    "json_serializer",
    "json_deserializer",
    "isolation_level",
    "execution_options",
)


class _EngineSettings(Settings):
    """:class:`EngineOptions`, checked once, when the storage is built (the module doc's
    rules; :meth:`for_target` applies the backend's). Its fields are the options, each
    ``None`` when not given (SQLAlchemy's default then)."""

    @model_validator(mode="before")
    @classmethod
    def _known(cls, data: object) -> object:
        unknown = sorted(set(data) - set(cls.model_fields)) if isinstance(data, Mapping) else []
        if unknown:
            reserved = [name for name in unknown if name in _SET_BY_THE_STORE]
            why = f" ({', '.join(reserved)}: set by the store itself)" if reserved else ""
            raise ConfigurationError(
                f"unknown storage option(s) {', '.join(unknown)}{why}; accepted: "
                f"sqlite_synchronous, {', '.join(cls.model_fields)}"
            )
        return data

    def __hash__(self) -> int:
        # connect_args' values need not be hashable: its names stand for it (equal
        # settings still hash alike).
        return hash(
            tuple(
                tuple(sorted(value)) if name == "connect_args" and value is not None else value
                for name, value in self.__dict__.items()
            )
        )

    def for_target(self, *, backend: str, memory: bool) -> EngineSettings:
        """These options where the store runs: SQLite refuses what its connections or
        ``:memory:`` cannot take; on PostgreSQL ``connect_args`` become asyncpg's."""
        options = self.options()
        if backend == "sqlite":
            given = [name for name in ("connect_args", *_POOL_OPTIONS) if name in options]
            refused = given if memory else [name for name in given if name == "connect_args"]
            if refused:
                where = "':memory:' has one connection and no pool"
                if not memory:
                    where = "SQLite connections are set up by the store itself"
                raise ConfigurationError(
                    f"{', '.join(refused)} cannot be used with SQLite here: {where}"
                )
            return self
        if "connect_args" not in options:
            return self
        return self.replace(connect_args=_driver_arguments(options["connect_args"], from_url=False))

    def options(self) -> dict[str, Any]:
        """The options given (``None`` is SQLAlchemy's default), for ``create_engine``."""
        return {
            name: value
            for name in type(self).model_fields
            if (value := getattr(self, name)) is not None
        }


def _settings_field(hint: Any) -> tuple[Any, None]:
    """An :class:`EngineOptions` entry as a settings field: its type or ``None`` (not
    given, the default), its check run on any value given."""
    return Annotated[(hint.__origin__ | None, *hint.__metadata__)], None


if TYPE_CHECKING:
    EngineSettings = _EngineSettings
else:
    EngineSettings = create_model(
        "EngineSettings",
        __base__=_EngineSettings,
        __module__=__name__,
        __doc__=_EngineSettings.__doc__,
        **{
            name: _settings_field(hint)
            for name, hint in get_type_hints(EngineOptions, include_extras=True).items()
        },
    )


def check_engine_options(
    options: Mapping[str, object], *, backend: str, memory: bool
) -> EngineSettings:
    """The options, checked and normalised (see the module doc for the rules)."""
    checked = EngineSettings.model_validate(dict(options))
    return checked.for_target(backend=backend, memory=memory)


# -- PostgreSQL: URL parameters and connect_args for asyncpg -------------------------------

SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")


def _ssl_mode(name: str, value: object) -> object:
    if isinstance(value, str) and value not in SSL_MODES:
        raise ConfigurationError(f"{name} must be one of {', '.join(SSL_MODES)}, not {value!r}")
    return value  # from code it may also be an ssl.SSLContext or a bool, as asyncpg takes


def _text(name: str, value: object) -> object:
    return value


# asyncpg.connect() keywords, each with the check (and conversion from URL text) it needs.
_DRIVER: dict[str, Callable[[str, Any], Any]] = {
    "ssl": _ssl_mode,
    "direct_tls": _flag,
    "timeout": _seconds,
    "command_timeout": _seconds,
    "statement_cache_size": _count,
    "max_cached_statement_lifetime": _count,
    "max_cacheable_statement_size": _count,
    "target_session_attrs": _text,
    "passfile": _text,
    "service": _text,
    "servicefile": _text,
    "krbsrvname": _text,
    "gsslib": _text,
}
# Only from code (objects a URL cannot spell), as asyncpg or SQLAlchemy's dialect take them.
_DRIVER_FROM_CODE = {
    name: _text for name in ("connection_class", "record_class", "prepared_statement_name_func")
}
# libpq's spellings of asyncpg's keywords.
_ALIASES = {"sslmode": "ssl", "connect_timeout": "timeout"}
# Run-time server settings a URL commonly carries: sent at connect (asyncpg server_settings).
SERVER_SETTINGS = (
    "application_name",
    "options",
    "search_path",
    "statement_timeout",
    "lock_timeout",
    "idle_in_transaction_session_timeout",
    "idle_session_timeout",
    "timezone",
    "client_min_messages",
    "jit",
    "work_mem",
)
# Left in the URL for SQLAlchemy's dialect, which reads them itself (multi-host lists too).
_LEFT_IN_THE_URL = ("host", "port", "user", "database", "prepared_statement_cache_size")


def _settings(value: object) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ConfigurationError("connect_args['server_settings'] must map names to strings")
    return dict(value)


def _driver_arguments(given: Mapping[str, Any], *, from_url: bool) -> dict[str, Any]:
    """``given`` (URL parameters or ``connect_args``) as ``asyncpg.connect()`` keywords."""
    arguments: dict[str, Any] = {}
    settings: dict[str, str] = {}
    unknown: list[str] = []
    given_as: dict[str, str] = {}  # asyncpg keyword -> the name it was given under
    where = "URL parameter" if from_url else "connect_args key"
    for name, value in given.items():
        if from_url and isinstance(value, tuple):
            raise ConfigurationError(f"{where} {name} is given more than once")
        keyword = _ALIASES.get(name, name)
        if name in SERVER_SETTINGS:
            settings[name] = value if isinstance(value, str) else str(value)
        elif name == "server_settings" and not from_url:
            settings.update(_settings(value))
        elif keyword in _DRIVER or (keyword in _DRIVER_FROM_CODE and not from_url):
            if keyword in given_as:
                raise ConfigurationError(
                    f"{where}s {given_as[keyword]} and {name} say the same thing; give one"
                )
            given_as[keyword] = name
            arguments[keyword] = {**_DRIVER, **_DRIVER_FROM_CODE}[keyword](name, value)
        elif name in ("prepared_statement_cache_size",):
            arguments[name] = _count(name, value)
        else:
            unknown.append(name)
    if unknown:
        hint = ""
        if any(name.startswith("ssl") for name in unknown):
            hint = " (certificates: pass an ssl.SSLContext as connect_args={'ssl': context})"
        raise ConfigurationError(
            f"{where}(s) {', '.join(sorted(unknown))} not understood{hint}; accepted: "
            f"{', '.join(sorted({*_DRIVER, *_ALIASES}))}, the server settings "
            f"{', '.join(SERVER_SETTINGS)}"
            + ("" if from_url else ", server_settings, " + ", ".join(_DRIVER_FROM_CODE))
        )
    if settings:
        arguments["server_settings"] = settings
    return arguments


def postgres_connection(
    url: URL, connect_args: Mapping[str, Any] | None = None
) -> tuple[URL, dict[str, Any]]:
    """The URL SQLAlchemy's dialect reads and the ``connect_args`` for asyncpg: the URL's
    own parameters checked and typed, then ``connect_args`` (already checked) over them."""
    moved = {k: v for k, v in url.query.items() if k not in _LEFT_IN_THE_URL}
    if "prepared_statement_cache_size" in url.query:
        _count("prepared_statement_cache_size", url.query["prepared_statement_cache_size"])
    arguments = _driver_arguments(moved, from_url=True)
    for name, value in (connect_args or {}).items():
        if name == "server_settings":
            arguments["server_settings"] = {**arguments.get("server_settings", {}), **value}
        else:
            arguments[name] = value
    return url.difference_update_query(list(moved)), arguments
