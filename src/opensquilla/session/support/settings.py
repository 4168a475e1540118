"""Settings as frozen pydantic models whose refusals are the package's own errors.

A settings model is checked once, when it is built: its validators raise
``ConfigurationError`` (or ``InvalidInputError``) naming the setting, and the model hands that
error back unchanged instead of pydantic's ``ValidationError``. Once built it cannot change
(``replace()`` builds a checked copy), so nothing that uses it checks it again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Self

from pydantic import BaseModel, ConfigDict, ValidationError

from ..errors import ConfigurationError, SessionStoreError


@contextlib.contextmanager
def settings_errors(what: str) -> Iterator[None]:
    """Turn the ``ValidationError`` of building ``what`` into the package's error: the
    first one its validators raised, or a ``ConfigurationError`` naming the setting."""
    try:
        yield
    except ValidationError as exc:
        raise _package_error(what, exc) from None


def _package_error(what: str, exc: ValidationError) -> SessionStoreError:
    errors = exc.errors(include_url=False, include_input=False)
    for error in errors:
        raised = (error.get("ctx") or {}).get("error")
        if isinstance(raised, SessionStoreError):
            return raised
    unknown = [str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden" and e["loc"]]
    if unknown:
        return ConfigurationError(f"unknown {what} setting(s): {', '.join(unknown)}")
    first = errors[0]
    name = ".".join(str(part) for part in first["loc"]) or what
    # pydantic's own message names the expected kind; the value is never shown (a key?).
    return ConfigurationError(f"{name}: {first['msg']}"[:200])


class Settings(BaseModel):
    """A frozen, checked-once settings model (see the module doc)."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    if not TYPE_CHECKING:  # mypy keeps the fields' own signature

        def __init__(self, **data: Any) -> None:
            with settings_errors(type(self).__name__):
                super().__init__(**data)

    @classmethod
    def model_validate(cls, *args: Any, **kwargs: Any) -> Self:
        with settings_errors(cls.__name__):
            return super().model_validate(*args, **kwargs)

    @classmethod
    def model_validate_json(cls, *args: Any, **kwargs: Any) -> Self:
        with settings_errors(cls.__name__):
            return super().model_validate_json(*args, **kwargs)

    @classmethod
    def model_validate_strings(cls, *args: Any, **kwargs: Any) -> Self:
        with settings_errors(cls.__name__):
            return super().model_validate_strings(*args, **kwargs)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy; with ``update``, checked as a new one is (:meth:`replace`)."""
        if update:
            return self.replace(**update)
        return super().model_copy(deep=deep)

    @classmethod
    def model_construct(cls, _fields_set: set[str] | None = None, **values: Any) -> Self:  # type: ignore[override]
        """Built and checked as ``cls(**values)`` is: a settings model is never unchecked."""
        return cls(**values)

    def validate(self) -> None:  # type: ignore[override]
        """Check the settings again (kept from the dataclass; a built model is always
        checked already, and cannot change)."""
        type(self)(**{name: getattr(self, name) for name in self.model_fields_set})

    def __str__(self) -> str:
        return repr(self)

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes``, checked as a new one is."""
        given = {name: getattr(self, name) for name in self.model_fields_set}
        return type(self)(**{**given, **changes})

    def __setattr__(self, name: str, value: Any) -> None:
        raise ConfigurationError(
            f"{type(self).__name__} cannot be changed once built (it was checked then): "
            f"build a new one, e.g. config.replace({name}=...)"
        )

    def __delattr__(self, name: str) -> None:
        raise ConfigurationError(f"{type(self).__name__} cannot be changed once built")
