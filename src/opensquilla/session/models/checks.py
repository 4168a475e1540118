"""The value domain: what a value put into a record, or passed as an argument, may be.

One domain on both backends: a value is refused here, before any statement, when either
database would refuse it or store something else (SQLite takes integers of any size in a
32-bit column and turns NaN into NULL; Postgres refuses NUL in plain text and index
entries beyond ~2.7 kB). Integer ranges are the columns' (``Integer`` 32-bit,
``BigInteger`` 64-bit; a test keeps them in step with ``db/tables.py``). Reads build models
without validation (``_Record.from_row``), so rows written before these rules still load.
See docs/semantics.md#values.

The annotated types below are what the records' fields are declared with; the ``check_*``
functions apply the same rules to plain arguments, and :func:`invalid_input` is the one
place where pydantic's errors become the package's ``InvalidInputError``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from pydantic import AfterValidator, Field, Strict, ValidationError

from ..errors import InvalidInputError
from ..keys import canonicalize_session_key, normalize_agent_id, require_session_key

if TYPE_CHECKING:
    from .records import _Record

T = TypeVar("T")

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# Text that is part of a PostgreSQL btree index entry is bounded so that the entry fits
# (at most 2704 bytes; a character is at most 4 bytes of UTF-8, and a NUL-escaped value
# adds a 3-byte marker). ``session_key`` (512, keys.py) with ``state_kind`` and
# ``provider`` (64 each) is the largest composite entry: about 2.6 kB.
SESSION_ID_MAX_LENGTH = 256
COMPACTION_ID_MAX_LENGTH = 256
WORKSPACE_ID_MAX_LENGTH = 512
STATE_KIND_MAX_LENGTH = 64
PROVIDER_MAX_LENGTH = 64
LABEL_MAX_LENGTH = 512  # docs/semantics.md#values

_FORBIDDEN_IN_IDENTIFIER = re.compile("[\x00\ud800-\udfff]")


def _identifier(value: str) -> str:
    """Identifier-like text is plain text on both backends: no NUL (Postgres could not
    store it unescaped) and no unpaired surrogate (not UTF-8 at all)."""
    if _FORBIDDEN_IN_IDENTIFIER.search(value):
        raise ValueError("must not contain NUL characters or unpaired surrogates")
    return value


def _json_document(value: Any) -> Any:
    """A JSON field's object keys must be strings: ``json`` would silently turn any other
    key into one (``1`` into ``"1"``, ``None`` into ``"null"``), so the value would not come
    back as it was written. Values that are not JSON at all (NaN, sets, other objects) are
    refused where the document is encoded, before anything is written. Walked without
    recursion: a deeply nested document is refused there too, with its own message."""
    pending = [value]
    seen: set[int] = set()
    while pending:
        item = pending.pop()
        if not isinstance(item, dict | list | tuple) or id(item) in seen:
            continue  # a scalar, or a container already walked (shared or circular)
        seen.add(id(item))
        if isinstance(item, dict):
            for name, inner in item.items():
                if not isinstance(name, str):
                    raise ValueError(f"JSON object keys must be strings, not {type(name).__name__}")
                pending.append(inner)
        else:
            pending.extend(item)
    return value


def member_of(kind: type[StrEnum]) -> AfterValidator:
    """The field holds one of ``kind``'s values (docs/semantics.md#values), stored as plain
    text."""

    def check(value: str) -> str:
        try:
            return str(kind(value).value)
        except ValueError:
            raise ValueError(f"{value!r} is not a valid {kind.__name__}") from None

    return AfterValidator(check)


Int32 = Annotated[int, Strict(), Field(ge=INT32_MIN, le=INT32_MAX)]
Int64 = Annotated[int, Strict(), Field(ge=INT64_MIN, le=INT64_MAX)]
Count32 = Annotated[int, Strict(), Field(ge=0, le=INT32_MAX)]
Count64 = Annotated[int, Strict(), Field(ge=0, le=INT64_MAX)]
Millis = Int64
Finite = Annotated[float, Strict(), Field(allow_inf_nan=False)]
Flag = Annotated[bool, Strict()]
Text = Annotated[str, Strict()]
Identifier = Annotated[str, Strict(), AfterValidator(_identifier)]
Role = Annotated[str, Strict(), Field(min_length=1), AfterValidator(_identifier)]
SessionId = Annotated[
    str,
    Strict(),
    Field(min_length=1, max_length=SESSION_ID_MAX_LENGTH),
    AfterValidator(_identifier),
]
# A record's own key: canonical and not empty (the store's keys.py rules).
SessionKey = Annotated[str, Strict(), AfterValidator(require_session_key)]
LineageKey = Annotated[str, Strict(), AfterValidator(canonicalize_session_key)]
AgentId = Annotated[str, Strict(), AfterValidator(normalize_agent_id)]
ArchiveCompactionId = Annotated[
    str, Strict(), Field(max_length=COMPACTION_ID_MAX_LENGTH), AfterValidator(_identifier)
]
SummaryCompactionId = Annotated[str, Strict(), Field(max_length=COMPACTION_ID_MAX_LENGTH)]
JSONObject = Annotated[dict[Text, Any], AfterValidator(_json_document)]
JSONList = Annotated[list[dict[Text, Any]], AfterValidator(_json_document)]


def describe(value: object) -> str:
    """The kind of a refused value, for messages (never a long or secret-looking value)."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, int | float):
        shown = repr(value)
        return shown if len(shown) <= 40 else f"an {type(value).__name__} of {len(shown)} digits"
    if isinstance(value, str):
        return f"a str of {len(value)} characters"
    return f"a {type(value).__name__}"


def invalid_input(exc: ValidationError) -> InvalidInputError:
    """The package's error for a pydantic ``ValidationError``: each field, what is wrong
    with it and the kind of value given (the one place where pydantic errors are turned
    into ours)."""
    problems = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "value"
        problems.append(f"{where}: {error['msg']} (got {describe(error.get('input'))})")
    return InvalidInputError(f"invalid {exc.title}: " + "; ".join(problems))


def check_integer(name: str, value: object, *, minimum: int = 0, maximum: int = INT64_MAX) -> int:
    """``value`` as an argument that must be an ``int`` (not a ``bool``) in range."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(f"{name} must be an integer, not {describe(value)}")
    if value < minimum:
        raise InvalidInputError(f"{name} must be >= {minimum}, not {describe(value)}")
    if value > maximum:
        raise InvalidInputError(
            f"{name} must be <= {maximum} (what the database can store), not {describe(value)}"
        )
    return value


def check_optional_integer(
    name: str, value: object, *, minimum: int = 0, maximum: int = INT64_MAX
) -> int | None:
    return None if value is None else check_integer(name, value, minimum=minimum, maximum=maximum)


def check_instance(name: str, value: object, kind: type[T]) -> T:
    """``value`` as an argument that must be a ``kind`` (a record the caller read or built)."""
    if not isinstance(value, kind):
        raise InvalidInputError(f"{name} must be a {kind.__name__}, not {describe(value)}")
    return value


def check_instances(name: str, values: object, kind: type[T]) -> list[T]:
    """``values`` as an argument that must be a list or tuple of ``kind`` (a string, which
    is a sequence of characters, is refused, as is a sequence holding anything else)."""
    if not isinstance(values, list | tuple):
        raise InvalidInputError(f"{name} must be a list of {kind.__name__}, not {describe(values)}")
    for index, value in enumerate(values):
        if not isinstance(value, kind):
            raise InvalidInputError(
                f"{name}[{index}] must be a {kind.__name__}, not {describe(value)}"
            )
    return list(values)


def check_page(limit: object, offset: object) -> None:
    """A page: ``limit`` ``None`` or an int >= 0, ``offset`` an int >= 0."""
    check_optional_integer("limit", limit)
    check_integer("offset", offset)


def check_millis(name: str, value: object) -> None:
    """A time in epoch milliseconds: any signed 64-bit integer."""
    check_integer(name, value, minimum=-(2**63))


def check_text(
    name: str,
    value: object,
    *,
    identifier: bool = False,
    max_length: int | None = None,
    non_empty: bool = False,
) -> str:
    """``value`` as a text argument: a ``str``; with ``identifier`` no NUL or unpaired
    surrogate; at most ``max_length`` characters."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{name} must be a string, not {describe(value)}")
    if non_empty and not value:
        raise InvalidInputError(f"{name} must not be empty")
    if max_length is not None and len(value) > max_length:
        raise InvalidInputError(
            f"{name} is {len(value)} characters long; the limit is {max_length}"
        )
    if identifier and _FORBIDDEN_IN_IDENTIFIER.search(value):
        raise InvalidInputError(f"{name} must not contain NUL characters or unpaired surrogates")
    return value


def check_optional_text(
    name: str,
    value: object,
    *,
    identifier: bool = False,
    max_length: int | None = None,
    non_empty: bool = False,
) -> str | None:
    if value is None:
        return None
    return check_text(
        name, value, identifier=identifier, max_length=max_length, non_empty=non_empty
    )


def check_flag(name: str, value: object) -> bool:
    """``value`` as a yes/no argument: only ``True`` or ``False`` (``"no"`` is truthy)."""
    if not isinstance(value, bool):
        raise InvalidInputError(f"{name} must be True or False, not {describe(value)}")
    return value


def check_session_id(name: str, value: object) -> str:
    """``value`` as a session id argument (the ``session_id`` fields' domain)."""
    return check_text(
        name, value, identifier=True, max_length=SESSION_ID_MAX_LENGTH, non_empty=True
    )


def check_record(name: str, value: object, kind: type[_Record]) -> None:
    """``value`` must be a ``kind`` (a record of the right type, not a dict or a row)."""
    if not isinstance(value, kind):
        raise InvalidInputError(f"{name} must be a {kind.__name__}, not {describe(value)}")


def check_text_list(name: str, values: object, *, identifier: bool = False) -> list[str]:
    """``values`` as a list-of-text argument: a ``list`` or ``tuple`` of ``str`` (a single
    string is refused, not taken for its characters); each item as :func:`check_text`."""
    if not isinstance(values, list | tuple):
        raise InvalidInputError(f"{name} must be a list of strings, not {describe(values)}")
    return [
        check_text(f"{name}[{index}]", value, identifier=identifier)
        for index, value in enumerate(values)
    ]


def refuse_unknown_fields(call: str, fields: Mapping[str, object], kind: Any) -> None:
    """``**fields`` accepts any name at run time: refuse one ``kind`` (a ``TypedDict``)
    does not declare, as a plain keyword parameter would."""
    for name in fields:
        if name not in kind.__optional_keys__:
            raise TypeError(f"{call}() got an unexpected keyword argument {name!r}")
