"""Vertex AI custom training prices: the table in ``common/vertex_ai_prices.yaml`` (with its source and date),
and an environment's ``prices:`` over it (negotiated discounts, regions the table lacks).

Both infra/ (which checks a config's ``prices:`` names only machines and accelerators that exist) and jobs/
(which prices every plan, jobs/definition/cost.py) read it, so it lives here. The table names exactly the
machine types and accelerators of the catalogue in jobs/definition/machines.py (tests/jobs/test_cost.py
holds them equal), so a name the table lacks is a machine Vertex AI does not have.

    from common.prices import load_table
    load_table().price("us-central1", "machines", "n1-standard-4")   # Price(on_demand=0.218499, spot=...)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

TABLE_FILE = Path(__file__).resolve().parent / "vertex_ai_prices.yaml"
MACHINES = "machines"
ACCELERATORS = "accelerators"
KINDS = (MACHINES, ACCELERATORS)
ON_DEMAND = "on_demand"
SPOT = "spot"
TIERS = (ON_DEMAND, SPOT)


@dataclass(frozen=True)
class Price:
    """USD per hour of one machine or one accelerator; None where no price is known."""

    on_demand: float | None = None
    spot: float | None = None

    def of(self, tier: str) -> float | None:
        return self.spot if tier == SPOT else self.on_demand


@dataclass(frozen=True)
class PriceTable:
    """{region: {machines|accelerators: {name: Price}}}, with where the figures come from."""

    source: str
    date: str
    regions: Mapping[str, Mapping[str, Mapping[str, Price]]] = field(default_factory=dict)
    spot_source: str = ""
    # Where an environment's figures came from (its config file), shown beside the table's source.
    overridden_by: str = ""

    def price(self, region: str, kind: str, name: str) -> Price | None:
        return self.regions.get(region, {}).get(kind, {}).get(name)

    def names(self, kind: str) -> frozenset[str]:
        """Every machine type (or accelerator) the table prices in some region."""
        return frozenset(n for table in self.regions.values() for n in table.get(kind, {}))

    def with_overrides(self, overrides: Mapping[str, Mapping[str, Mapping[str, Price]]], where: str
                       ) -> PriceTable:
        """This table with an environment's prices over it: a tier it gives replaces the table's, one it
        leaves out keeps the table's; a region or name the table lacks is added."""
        if not overrides:
            return self
        regions = {r: {k: dict(v) for k, v in kinds.items()} for r, kinds in self.regions.items()}
        for region, kinds in overrides.items():
            for kind, names in kinds.items():
                table = regions.setdefault(region, {}).setdefault(kind, {})
                for name, given in names.items():
                    base = table.get(name, Price())
                    table[name] = Price(
                        on_demand=given.on_demand if given.on_demand is not None else base.on_demand,
                        spot=given.spot if given.spot is not None else base.spot,
                    )
        return PriceTable(self.source, self.date, regions, self.spot_source, where)


def parse_prices(raw: Any) -> dict[str, dict[str, dict[str, Price]]]:
    """{region: {kind: {name: {on_demand, spot}}}} -> Prices; the caller has checked the shape."""
    return {
        region: {kind: {name: Price(**{t: _number(v.get(t)) for t in TIERS}) for name, v in names.items()}
                 for kind, names in kinds.items()}
        for region, kinds in raw.items()
    }


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


@lru_cache(maxsize=1)
def load_table() -> PriceTable:
    """The repository's table (a trusted file of this checkout, read once)."""
    raw = yaml.safe_load(TABLE_FILE.read_text(encoding="utf-8"))
    return PriceTable(str(raw["source"]), str(raw["date"]), parse_prices(raw["regions"]),
                      str(raw.get("spot_source", "")))
