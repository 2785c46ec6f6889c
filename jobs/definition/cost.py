"""What a compiled job may cost: each pool's price per hour in the job's region (on-demand, or Spot under
``scheduling.strategy: SPOT``), the ceiling (the timeout x every replica's price, x ``maxTrialCount`` for a
tuning job) and, where an earlier cloud run of the same definition measured its duration, the expected cost.

Pure: a compiled body, a region, a ``common.prices.PriceTable`` (the repository's, with the environment's
``prices:`` over it) and an earlier run's durations in, an ``Estimate`` out; ``Estimate.lines()`` is what
``--dry-run`` and every submit print, and ``check_cap`` refuses a ceiling over the environment's cap (or
``--max-cost``) with one line. Nothing here reads a file or the clock.

    estimate(kind, body, "us-central1", load_table()).ceiling   # USD, or None where a price is unknown
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from common.prices import ACCELERATORS, MACHINES, ON_DEMAND, SPOT, PriceTable
from infra.schedules import VERTEX_DEFAULT_TIMEOUT_S
from jobs.definition.body import duration_seconds, job_pools, job_spec
from jobs.definition.errors import JobError, short
from jobs.definition.kinds import runs_study
from jobs.definition.machines import TPU_PREFIX, is_tpu

# scheduling.strategy values priced at Spot rates; every other strategy (STANDARD, FLEX_START, the deprecated
# ON_DEMAND and LOW_COST) is priced on-demand, which is never less than what it is billed.
SPOT_STRATEGIES = ("SPOT",)
TIER_NAMES = {ON_DEMAND: "on-demand", SPOT: "Spot"}
NO_PRICE = "no price known"
CAP_FLAG = "--max-cost"


@dataclass(frozen=True)
class PoolCost:
    """One worker pool: its machine, accelerators and replicas, and one replica's price per hour."""

    index: int
    machine_type: str
    accelerator: str
    count: int
    replicas: int
    topology: str
    machine_price: float | None
    accelerator_price: float | None  # all of one replica's accelerators; 0.0 without any

    @property
    def hourly(self) -> float | None:
        """One replica's USD per hour; None when the machine's or an accelerator's price is unknown."""
        if self.machine_price is None or self.accelerator_price is None:
            return None
        return self.machine_price + self.accelerator_price

    @property
    def unpriced(self) -> tuple[str, ...]:
        names = (self.machine_type,) if self.machine_price is None else ()
        return names + ((self.accelerator,) if self.accelerator_price is None else ())

    def describe(self) -> str:
        hardware = f"{self.replicas} x {self.machine_type}"
        if self.accelerator:
            hardware += f" + {self.count} x {self.accelerator}"
            if self.accelerator.startswith(TPU_PREFIX) and self.accelerator != "TPU_V5_LITEPOD":
                hardware += f" ({self.accelerator.removeprefix(TPU_PREFIX).lower()}-{self.count})"
        if self.topology:
            hardware += f" (topology {self.topology})"
        if self.hourly is None:
            return f"pool {self.index}: {hardware}: {NO_PRICE} for {', '.join(self.unpriced)}"
        if is_tpu(self.machine_type, self.accelerator):
            parts = f"{_usd(self.accelerator_price)} TPU, host included"
        elif self.accelerator:
            parts = f"{_usd(self.machine_price)} machine + {_usd(self.accelerator_price)} accelerators"
        else:
            parts = "machine"
        return f"pool {self.index}: {hardware}: {_usd(self.hourly)}/h per replica ({parts})"


@dataclass(frozen=True)
class Earlier:
    """An earlier cloud run of the same definition that measured its duration (``run_job.py report``)."""

    job: str  # its resource name
    seconds: float  # a CustomJob's duration, or a tuning job's mean succeeded trial duration
    report: str  # the report file it was read from


@dataclass(frozen=True)
class Estimate:
    region: str
    tier: str
    pools: tuple[PoolCost, ...]
    timeout_s: float
    trials: int  # 1 for a CustomJob; maxTrialCount for a tuning job
    parallel: int | None  # a tuning job's parallelTrialCount
    source: str
    date: str
    overridden_by: str = ""
    earlier: Earlier | None = None

    @property
    def study(self) -> bool:
        return self.parallel is not None

    @property
    def hourly(self) -> float | None:
        """Every replica of one trial (or of the job), USD per hour; None when a price is unknown."""
        prices = [p.hourly for p in self.pools]
        if any(p is None for p in prices):
            return None
        return sum(p * pool.replicas for p, pool in zip(prices, self.pools, strict=True))

    @property
    def ceiling(self) -> float | None:
        """The most the job can cost: its timeout x every replica x the trials, in USD, rounded up to the
        cent; None when a price is unknown."""
        if self.hourly is None:
            return None
        return cents_up(self.hourly * self.timeout_s / 3600 * self.trials)

    @property
    def expected(self) -> float | None:
        if self.earlier is None or self.hourly is None:
            return None
        return cents_up(self.hourly * self.earlier.seconds / 3600 * self.trials)

    def lines(self) -> list[str]:
        where = f"{TIER_NAMES[self.tier]} in {self.region}"
        source = f"prices of {self.date} from {self.source}"
        if self.overridden_by:
            source += f", with {self.overridden_by}'s prices over them"
        lines = [f"cost ({where}; {source}):"]
        lines += [f"  {pool.describe()}" for pool in self.pools]
        hours = _hours(self.timeout_s)
        if self.ceiling is None:
            missing = sorted({name for pool in self.pools for name in pool.unpriced})
            lines.append(
                f"  ceiling: unknown, {NO_PRICE} for {', '.join(missing)} ({TIER_NAMES[self.tier]}) in "
                f"{self.region}; add it to the environment's prices:"
            )
            return lines
        replicas = sum(p.replicas for p in self.pools)
        per = f"timeout {hours} x {replicas} replica{'s' * (replicas != 1)} at {_usd(self.hourly)}/h"
        if self.study:
            per = (f"{self.trials} trials (maxTrialCount; parallelTrialCount {self.parallel} does not change "
                   f"it) x {per}")
        lines.append(f"  ceiling: at most ${self.ceiling:.2f} (USD): {per}")
        if self.earlier is not None:
            what = "its trials took" if self.study else "it took"
            lines.append(
                f"  expected: ${self.expected:.2f}: an earlier run, {self.earlier.job}, {what} "
                f"{self.earlier.seconds:.0f} s{' on average' if self.study else ''} ({self.earlier.report})"
            )
        else:
            lines.append("  expected: not known yet (no earlier cloud run of this definition reported its "
                         "duration; `run_job.py report RESOURCE_NAME` records one)")
        return lines


def cents_up(usd: float) -> float:
    """``usd`` rounded up to the cent (a ceiling never shown below what it bounds); float noise ignored."""
    return math.ceil(round(usd * 100, 6)) / 100


def _usd(value: float) -> str:
    return f"${value:.4f}"


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:g} h"


def tier_of(spec: dict) -> str:
    strategy = (spec.get("scheduling") or {}).get("strategy")
    return SPOT if strategy in SPOT_STRATEGIES else ON_DEMAND


def estimate(
    kind: str, body: dict, region: str, table: PriceTable, earlier: Earlier | None = None
) -> Estimate:
    """The cost of a compiled ``kind`` body in ``region`` by ``table``."""
    spec = job_spec(body, kind) or {}
    tier = tier_of(spec)
    pools = []
    for pool in job_pools(body, kind):
        machine = pool.machine
        machine_type = str(machine.get("machineType") or "")
        if not machine_type:
            continue  # an empty placeholder pool (no replicas)
        accelerator = str(machine.get("acceleratorType") or "")
        if accelerator == "ACCELERATOR_TYPE_UNSPECIFIED":
            accelerator = ""
        count = int(machine.get("acceleratorCount") or 0) if accelerator else 0
        machine_price = _price(table, region, MACHINES, machine_type, tier)
        accelerator_price = 0.0
        if accelerator:
            each = _price(table, region, ACCELERATORS, accelerator, tier)
            accelerator_price = None if each is None else each * count
        pools.append(PoolCost(
            index=pool.index,
            machine_type=machine_type,
            accelerator=accelerator,
            count=count,
            replicas=int(pool.raw.get("replicaCount") or 1),
            topology=str(machine.get("tpuTopology") or ""),
            machine_price=machine_price,
            accelerator_price=accelerator_price,
        ))
    timeout = duration_seconds((spec.get("scheduling") or {}).get("timeout"))
    study = runs_study(kind)
    return Estimate(
        region=region,
        tier=tier,
        pools=tuple(pools),
        timeout_s=timeout if timeout is not None and timeout > 0 else VERTEX_DEFAULT_TIMEOUT_S,
        trials=int(body.get("maxTrialCount") or 1) if study else 1,
        parallel=int(body.get("parallelTrialCount") or 1) if study else None,
        source=table.source,
        date=table.date,
        overridden_by=table.overridden_by,
        earlier=earlier,
    )


def _price(table: PriceTable, region: str, kind: str, name: str, tier: str) -> float | None:
    price = table.price(region, kind, name)
    return None if price is None else price.of(tier)


@dataclass(frozen=True)
class Cap:
    """The most a job may cost: ``--max-cost`` for this run, else the environment's ``max_job_cost`` (a
    tuning job: ``max_study_cost``, or ``max_job_cost`` where that is unset)."""

    usd: float
    name: str  # --max-cost, max_job_cost or max_study_cost
    where: str  # the config file that set it ("" for the flag)


def pick_cap(study: bool, flag: float | None, job_cap: float | None, study_cap: float | None,
             config: str) -> Cap | None:
    if flag is not None:
        return Cap(flag, CAP_FLAG, "")
    if study and study_cap is not None:
        return Cap(study_cap, "max_study_cost", config)
    if job_cap is not None:
        return Cap(job_cap, "max_job_cost", config)
    return None


def cap_name(cap: Cap) -> str:
    return cap.name if not cap.where else f"{cap.name} of {cap.where}"


def check_cap(cost: Estimate, cap: Cap | None, file: str, flag: bool = True) -> None:
    """A JobError (one line: the ceiling, the cap, how to allow this run) when the ceiling is over ``cap``
    or cannot be known under one; ``flag``: the run takes --max-cost (a schedule's runs do not)."""
    if cap is None or math.isinf(cap.usd):  # --max-cost off
        return
    setting = cap_name(cap)
    if cost.ceiling is None:
        missing = sorted({name for pool in cost.pools for name in pool.unpriced})
        raise JobError(
            file, "cost",
            f"the ceiling cannot be checked against {setting} ${cap.usd:.2f}: {NO_PRICE} for "
            f"{', '.join(missing)} ({TIER_NAMES[cost.tier]}) in {cost.region}",
            "a price for it in the environment's prices:" + (f", or {CAP_FLAG} off for this run" * flag),
        )
    if cost.ceiling > cap.usd:
        raise JobError(
            file, "cost",
            f"the ceiling ${cost.ceiling:.2f} is over {setting} ${cap.usd:.2f}",
            f"a ceiling of at most ${cap.usd:.2f} (a shorter scheduling.timeout, fewer replicas or trials, "
            "Spot)" + (f", or {CAP_FLAG} {cost.ceiling:.2f} to allow this run" * flag),
        )


def parse_cap(text: str, file: str) -> float:
    """``--max-cost N``: a positive number of USD, or ``off`` (no cap for this run: infinity)."""
    if text == "off":
        return math.inf
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise JobError(file, CAP_FLAG, f"{short(text)} is not a cost",
                       "a positive number of US dollars such as 25 or 12.50, or off")
    return value
