from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from infra.cdk import Construct, TerraformResource
from infra.config import BILLING_ACCOUNT, EMAIL, PROJECT_NUMBER, PUBSUB_TOPIC, BillingBudgetConfig
from infra.constructs import validation as v
from infra.google import (
    BillingBudget,
    BillingBudgetAllUpdatesRule,
    BillingBudgetAmount,
    BillingBudgetAmountSpecifiedAmount,
    BillingBudgetBudgetFilter,
    BillingBudgetThresholdRules,
    MonitoringNotificationChannel,
)

# The Budget API publishes this schema of notification to a Pub/Sub topic (the only one it has).
PUBSUB_SCHEMA_VERSION = "1.0"
BUDGET_SERVICE = "billingbudgets.googleapis.com"
# The email notification channel is a Cloud Monitoring resource of the project.
CHANNEL_SERVICE = "monitoring.googleapis.com"


def budget_services(budget: BillingBudgetConfig | None) -> tuple[str, ...]:
    """The APIs the bootstrap stack enables for ``budget``. Each API is managed by one stack: with an email
    channel the bootstrap stack (applied first) manages the Monitoring API, and the platform stack not."""
    if budget is None:
        return ()
    return (BUDGET_SERVICE,) + ((CHANNEL_SERVICE,) if budget.email is not None else ())


@dataclass(frozen=True)
class BillingBudgetProps:
    project: str
    project_number: str
    display_name: str
    billing_account: str
    amount: float  # USD per calendar month
    thresholds: tuple[float, ...]  # percent of the amount, increasing
    email: str | None = None
    pubsub_topic: str | None = None
    depends_on: Sequence[TerraformResource] = ()

    def validate(self, where: str) -> None:
        v.check_project(where, self.project)
        v.check_str(where, "project_number", self.project_number, PROJECT_NUMBER, "the project's number")
        v.check_text(where, "display_name", self.display_name, 60)
        v.check_str(where, "billing_account", self.billing_account, BILLING_ACCOUNT,
                    "a billing account id such as 012345-6789AB-CDEF01")
        v.check(where, "amount", self.amount, isinstance(self.amount, float) and math.isfinite(self.amount)
                and self.amount > 0, "a positive float (USD)")
        ok = (isinstance(self.thresholds, tuple) and 0 < len(self.thresholds) <= 10
              and all(isinstance(t, float) and t > 0 for t in self.thresholds)
              and list(self.thresholds) == sorted(set(self.thresholds)))
        v.check(where, "thresholds", self.thresholds, ok, "1-10 increasing positive percentages")
        if self.email is not None:
            v.check_str(where, "email", self.email, EMAIL, "an email address")
        if self.pubsub_topic is not None:
            v.check_str(where, "pubsub_topic", self.pubsub_topic, PUBSUB_TOPIC, "projects/P/topics/T")


class ProjectBudget(Construct):
    """A monthly Cloud Billing budget on this project's spend (`google_billing_budget`, filtered to the
    project), alerting at each threshold the billing account's administrators and, when configured, an email
    notification channel of the project (`google_monitoring_notification_channel`) and a Pub/Sub topic.

    A budget alerts; it does not stop spending (a job's cap, jobs/definition/cost.py, refuses a submit). It
    belongs to the billing account, so it lives in the bootstrap stack: whoever applies it needs
    `billing.budgets.create` on the account (roles/billing.costsManager), which CI's deployer never holds.
    """

    def __init__(self, scope: Construct, id_: str, props: BillingBudgetProps) -> None:
        v.validate_props(type(self), id_, props)  # first: bad props leave nothing half-built in the stack
        super().__init__(scope, id_)
        depends_on = list(props.depends_on) or None
        self.channel: MonitoringNotificationChannel | None = None
        if props.email is not None:
            self.channel = MonitoringNotificationChannel(
                self, "email", project=props.project, type="email",
                display_name=f"{props.display_name} (email)", labels={"email_address": props.email},
                depends_on=depends_on)
        units = math.floor(props.amount)
        self.budget = BillingBudget(
            self, "budget",
            billing_account=props.billing_account,
            display_name=props.display_name,
            budget_filter=BillingBudgetBudgetFilter(projects=[f"projects/{props.project_number}"],
                                                    calendar_period="MONTH"),
            amount=BillingBudgetAmount(specified_amount=BillingBudgetAmountSpecifiedAmount(
                currency_code="USD", units=str(units), nanos=round((props.amount - units) * 1e9))),
            threshold_rules=[BillingBudgetThresholdRules(threshold_percent=t / 100)
                             for t in props.thresholds],
            all_updates_rule=BillingBudgetAllUpdatesRule(
                monitoring_notification_channels=[self.channel.id] if self.channel else None,
                pubsub_topic=props.pubsub_topic,
                schema_version=PUBSUB_SCHEMA_VERSION if props.pubsub_topic else None,
            ),
            depends_on=depends_on,
        )
