"""The kinds of Vertex AI job a definition can be, described once: every reader of a kind reads this table.

A kind's name is its ``kind:`` header and the aiplatform_v1 message; the rest is where it differs: the body
field holding its CustomJobSpec, the request field wrapping the body, the REST collection of its resource
names, the SDK's snake_case name (``create_<sdk>``, ``get_<sdk>``, ``list_<sdk>s``, the ``types.<sdk>``
module), and whether it runs a study. compile, validate, the cloud client, ``--follow``, the local runner,
schedules and the legacy converter all look a kind up here instead of spelling it out.
"""

from __future__ import annotations

from dataclasses import dataclass

CUSTOM_JOB = "CustomJob"
TUNING_JOB = "HyperparameterTuningJob"


@dataclass(frozen=True)
class JobKind:
    name: str  # the `kind:` header, and the aiplatform_v1 message class
    spec_field: str  # the body field with the CustomJobSpec (workerPoolSpecs, scheduling, ...)
    request_field: str  # the REST create request's field holding the body
    collection: str  # .../locations/<r>/<collection>/<id>
    sdk: str  # snake_case: JobServiceClient.create_<sdk>, aiplatform_v1.types.<sdk>
    study: bool  # a tuning job: studySpec, trial counts, trials

    @property
    def sdk_methods(self) -> tuple[str, str, str]:
        """(create, get, list) method names of JobServiceClient."""
        return f"create_{self.sdk}", f"get_{self.sdk}", f"list_{self.sdk}s"


JOB_KINDS: dict[str, JobKind] = {
    k.name: k
    for k in (
        JobKind(CUSTOM_JOB, "jobSpec", "customJob", "customJobs", "custom_job", study=False),
        JobKind(
            TUNING_JOB,
            "trialJobSpec",
            "hyperparameterTuningJob",
            "hyperparameterTuningJobs",
            "hyperparameter_tuning_job",
            study=True,
        ),
    )
}
# A BatchPredictionJob is no definition's kind (`run_job.py batch-predict` makes it from flags); the cloud
# client creates, reads and follows it by the same row.
BATCH_PREDICTION_JOB = "BatchPredictionJob"
RESOURCE_KINDS: dict[str, JobKind] = {
    **JOB_KINDS,
    BATCH_PREDICTION_JOB: JobKind(
        BATCH_PREDICTION_JOB, "", "batchPredictionJob", "batchPredictionJobs", "batch_prediction_job", False
    ),
}
KINDS = tuple(JOB_KINDS)  # the names, in this order wherever they are listed
KIND_BY_COLLECTION = {k.collection: k for k in JOB_KINDS.values()}


def runs_study(kind: str) -> bool:
    """Whether a ``kind`` job runs a study (studySpec, trial counts, trials); False for an unknown kind."""
    found = JOB_KINDS.get(kind)
    return bool(found and found.study)


def spec_field(kind: str) -> str:
    """The body field holding ``kind``'s CustomJobSpec: jobSpec or trialJobSpec."""
    return JOB_KINDS[kind].spec_field
