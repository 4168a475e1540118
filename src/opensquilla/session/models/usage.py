"""What one ``record_usage`` call adds to a session's counters, checked once at the front
door (docs/semantics.md#usage-counters).

The counters are the session row's: ``input_tokens``, ``output_tokens``, ``total_tokens``
(input plus output), ``cache_read``, ``cache_write``, and the cost columns, whose rules
follow upstream's cost roll-up:

* ``total_cost_usd`` = ``billed_cost_usd`` + ``estimated_cost_component_usd``: the best cost
  known; ``estimated_cost_usd`` is the legacy total and moves with ``total_cost_usd``;
* ``cost_source="provider_billed"`` (the provider's own bill) adds the cost to
  ``billed_cost_usd``; ``"opensquilla_estimate"`` (a price-table estimate) to
  ``estimated_cost_component_usd``; ``"unavailable"`` (no cost known for the usage) counts
  one ``missing_cost_entries`` and takes no ``cost_usd``;
* the row's ``cost_source`` becomes the kind recorded when it was ``"none"`` (or that kind
  already), else ``"mixed"``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, TypedDict, get_args

from ..errors import InvalidInputError
from .checks import INT64_MAX, check_integer, describe, refuse_unknown_fields

UsageCostSource = Literal["provider_billed", "opensquilla_estimate", "unavailable"]
USAGE_COST_SOURCES: tuple[str, ...] = get_args(UsageCostSource)
#: What a session row's ``cost_source`` holds before any cost, and once costs of more than
#: one kind were recorded.
NO_COST_SOURCE = "none"
MIXED_COST_SOURCE = "mixed"
#: The cost column each priced kind adds to (``total_cost_usd`` and the legacy
#: ``estimated_cost_usd`` take every priced cost).
COST_COMPONENT: dict[str, str] = {
    "provider_billed": "billed_cost_usd",
    "opensquilla_estimate": "estimated_cost_component_usd",
}
FLOAT_MAX = sys.float_info.max
TOKEN_FIELDS = ("input_tokens", "output_tokens", "cache_read", "cache_write")


class UsageFields(TypedDict, total=False):
    """The keyword arguments of ``record_usage``, declared once (``Unpack[UsageFields]``):
    the token counts of :data:`TOKEN_FIELDS` (0 each unless given), ``cost_usd`` and its
    ``cost_source`` (``None`` unless given)."""

    input_tokens: int
    output_tokens: int
    cache_read: int
    cache_write: int
    cost_usd: float | None
    cost_source: UsageCostSource | None


@dataclass(frozen=True, slots=True)
class CheckedUsage:
    """One call's increments, in the columns' domain: token counts non-negative and within
    64 bits (with ``input_tokens + output_tokens`` too), a cost finite and non-negative, and
    a ``cost_source`` from :data:`UsageCostSource` when a cost (or its absence) is told."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost_usd: float | None = None
    cost_source: UsageCostSource | None = None

    @property
    def total_tokens(self) -> int:
        """What ``total_tokens`` grows by: input plus output (cache tokens are counted in
        their own columns, as upstream's usage totals do)."""
        return self.input_tokens + self.output_tokens

    @property
    def missing_cost_entries(self) -> int:
        return 1 if self.cost_source == "unavailable" else 0

    def integer_deltas(self) -> dict[str, int]:
        """``{column: delta}`` of every integer counter this call changes (non-zero)."""
        deltas = {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
            "cache_read": self.cache_read,
            "cache_write": self.cache_write,
            "missing_cost_entries": self.missing_cost_entries,
        }
        return {name: delta for name, delta in deltas.items() if delta}

    def cost_deltas(self) -> dict[str, float]:
        """``{column: delta}`` of the cost columns a priced call adds to (none without a
        cost)."""
        if self.cost_usd is None or self.cost_source not in COST_COMPONENT:
            return {}
        cost = self.cost_usd
        component = COST_COMPONENT[self.cost_source]
        return {"total_cost_usd": cost, "estimated_cost_usd": cost, component: cost}

    def full_counters(self, counters: object) -> list[str]:
        """The counters of ``counters`` (a session row) with no room for this call's
        deltas: an integer past 2^63 - 1, a cost past the largest float."""
        full = [
            name
            for name, delta in self.integer_deltas().items()
            if getattr(counters, name) > INT64_MAX - delta
        ]
        full += [
            name
            for name, delta in self.cost_deltas().items()
            if delta and getattr(counters, name) > FLOAT_MAX - delta
        ]
        return full


def _cost(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInputError(
            f"cost_usd must be a number, not {describe(value)}; nothing was written"
        )
    if isinstance(value, int):
        if value > FLOAT_MAX:
            raise InvalidInputError(
                f"cost_usd is too large ({describe(value)}); nothing was written"
            )
        value = float(value)
    if not math.isfinite(value) or value < 0:
        raise InvalidInputError(
            f"cost_usd must be a finite number >= 0, not {describe(value)}; nothing was written"
        )
    return value + 0.0  # -0.0 is stored as 0.0


def check_usage(fields: Mapping[str, object]) -> CheckedUsage:
    """The keyword arguments of ``record_usage`` (:class:`UsageFields`) as
    :class:`CheckedUsage`, or ``InvalidInputError`` naming the argument (an undeclared one:
    ``TypeError``; nothing is read or written before)."""
    refuse_unknown_fields("record_usage", fields, UsageFields)
    counts = {name: check_integer(name, fields.get(name, 0)) for name in TOKEN_FIELDS}
    cost_usd = fields.get("cost_usd")
    cost_source = fields.get("cost_source")
    if counts["input_tokens"] + counts["output_tokens"] > INT64_MAX:
        raise InvalidInputError(
            f"input_tokens + output_tokens would take total_tokens past {INT64_MAX}, the "
            "largest value it can hold; nothing was written"
        )
    if cost_source is not None and (
        not isinstance(cost_source, str) or cost_source not in USAGE_COST_SOURCES
    ):
        raise InvalidInputError(
            f"cost_source must be one of {', '.join(USAGE_COST_SOURCES)} or None, not "
            f"{describe(cost_source)}; nothing was written"
        )
    cost = None if cost_usd is None else _cost(cost_usd)
    if cost is not None and cost_source is None:
        raise InvalidInputError(
            "cost_usd needs a cost_source (provider_billed or opensquilla_estimate); "
            "nothing was written"
        )
    if cost_source == "unavailable" and cost is not None:
        raise InvalidInputError(
            "cost_source 'unavailable' says no cost is known: pass no cost_usd with it; "
            "nothing was written"
        )
    if cost_source in COST_COMPONENT and cost is None:
        raise InvalidInputError(
            f"cost_source {cost_source!r} needs the cost_usd it describes; nothing was written"
        )
    return CheckedUsage(
        **counts,
        cost_usd=cost,
        cost_source=cost_source,  # type: ignore[arg-type]
    )


__all__ = [
    "COST_COMPONENT",
    "MIXED_COST_SOURCE",
    "NO_COST_SOURCE",
    "USAGE_COST_SOURCES",
    "CheckedUsage",
    "UsageCostSource",
    "UsageFields",
    "check_usage",
]
