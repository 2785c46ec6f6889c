"""One registry rule, two writers (common/model_registry.py): a scenario table run through `run_job.py` (a
`--follow` of each job, against the fake ModelService of tests/jobs/fake_vertex.py) and through the scheduled
workflow (the shipped dev schedule's program in the Workflows test interpreter, its connectors on that same
fake), with the registry compared after every step: the same versions, labels, descriptions and aliases,
whichever writer registered a job, and whichever registers it again."""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import datetime, timezone
from urllib.parse import unquote

import pytest
import yaml

import jobs.cloud.plan
from common.model_registry import DEFAULT_ALIAS, GATE, HELD, KEPT, MOVED, decide
from infra.config import load_environment
from infra.outputs import planned_outputs
from infra.schedules import (
    BATCH_CONNECTOR,
    CREATE_CONNECTOR,
    GET_MODEL_CONNECTOR,
    LIST_CONNECTOR,
    LIST_VERSIONS_CONNECTOR,
    MERGE_ALIASES_CONNECTOR,
    READ_OBJECT_CONNECTOR,
    UPLOAD_CONNECTOR,
    _gate_conditions,
    workflow_source,
)
from jobs.cloud.client import LocalDirStorage
from jobs.definition.model_registry import metrics_uri
from jobs.schedule import compile_schedules
from tests.infra.workflows_interpreter import Interpreter, http_error, operation_error
from tests.jobs.fake_vertex import FakeVertex, FakeVertexServer
from tests.jobs.helpers import run_cli

JOB_FILE = "jobs/recommender.yaml"
DAY = 86400
START = datetime(2026, 11, 24, 3, 0, 0, tzinfo=timezone.utc).timestamp()
EXECUTION = "abcdef12-3456-7890"


@dataclasses.dataclass(frozen=True)
class Step:
    name: str
    job: int  # which trained job is registered: a new index trains it now (with `value`)
    value: float | None  # its recall_at_k in metrics.json (None: no metrics.json)
    by: str  # who registers it in the mixed run: cli, workflow, or both (the workflow, then a CLI --follow)
    versions: int  # the registry's versions after the step
    production: str | None  # the version holding production (and default) after it


# The table: each row is the registry after it, whoever wrote it.
STEPS = [
    Step("the first run creates the model", 0, 0.30, "workflow", 1, "1"),
    Step("run_job.py --follow of that scheduled run reuses its version", 0, 0.30, "cli", 1, "1"),
    Step("a better run takes production and default", 1, 0.32, "both", 2, "2"),
    Step("a tie with an older holder moves both", 2, 0.32, "cli", 3, "3"),
    Step("the earlier tie registered again keeps nothing: a newer holder", 1, 0.32, "workflow", 3, "3"),
    Step("a worse run is kept without them", 3, 0.31, "both", 4, "3"),
    Step("a run without metrics.json is kept without them", 4, None, "cli", 5, "3"),
    Step("a clearly better run takes them", 5, 0.40, "workflow", 6, "6"),
    Step("the worse run registered again is only gated", 3, 0.31, "cli", 6, "6"),
]


def test_the_workflow_states_each_gate_rule_of_the_shared_table():
    """The generated program's conditions are GATE's rules, no more, no fewer (order: tested by the runs)."""
    from infra.schedules import ScheduledRegistration

    reg = ScheduledRegistration("m", "m", ("production",), (), "auc", "MAXIMIZE", "{}")
    assert list(_gate_conditions(reg)) == [rule.name for rule in GATE]
    assert {rule.outcome for rule in GATE} == {MOVED, KEPT, HELD}


@pytest.mark.parametrize(
    ("version", "value", "holder", "held", "rule"),
    [
        ("2", 0.3, "2", 0.9, "already_held"),
        ("2", None, None, None, "unknown_value"),
        ("2", 0.3, None, None, "first_holder"),
        ("2", 0.9, "10", 0.1, "newer_holder"),  # versions compare as numbers, not text
        ("10", 0.9, "9", None, "unknown_holder_value"),
        ("10", 0.9, "9", 0.9, "no_worse"),
        ("10", 0.8, "9", 0.9, "worse"),
    ],
)
def test_the_first_gate_rule_that_holds_decides(version, value, holder, held, rule):
    assert decide("MAXIMIZE", version, value, holder, lambda: held).name == rule


@pytest.fixture(scope="module")
def dev():
    """The shipped dev schedule as the stack compiles it (planned outputs; its workflow gets the deployed
    TensorBoard at run time), and the outputs of a deploy (the TensorBoard it made), which the CLI, given
    them, compiles against: the two must agree on the submission hash for --follow."""
    cfg = load_environment("dev")
    (run,) = compile_schedules(cfg)
    planned = planned_outputs(cfg)
    outputs = {**planned, "tensorboard": planned["tensorboard"].replace("PENDING_DEPLOY", "77")}
    late = {planned["tensorboard"]: "TENSORBOARD"}
    return run, yaml.safe_load(workflow_source(run, late)), outputs


class Project:
    """One project: the fake Vertex AI both writers call (jobs and the Model Registry), gs:// in a directory,
    and the jobs of the schedule trained so far."""

    def __init__(self, run, outputs, root, server) -> None:
        self.run, self.outputs, self.root, self.server = run, outputs, root, server
        self.fake: FakeVertex = server.fake
        self.fake.add_image(run.registration.container_spec_dict()["imageUri"])
        self.storage = LocalDirStorage(root)
        self.jobs: dict[int, dict] = {}
        self.batches: list[dict] = []  # the batch prediction requests executions sent (batch_predict:)

    # --- the schedule's jobs

    def train(self, index: int, value: float | None) -> tuple[dict, float]:
        """Job `index` as Vertex AI returns it once it succeeded (its model's metrics.json written), and the
        time its execution starts."""
        now = START + index * DAY
        stamp = datetime.fromtimestamp(now, timezone.utc).strftime("%Y%m%d-%H%M%S")
        run_id = f"{self.run.job_name}-{stamp}-{EXECUTION[:6]}"
        # As the workflow sends it: this run's id, and the TensorBoard the deploy made.
        planned = planned_outputs(load_environment("dev"))["tensorboard"]
        body = json.loads(self.run.body.replace(self.run.run_id_placeholder, run_id)
                          .replace(planned, self.outputs["tensorboard"]))
        job = {
            **body,
            "name": f"{self.run.parent}/customJobs/{5000 + index}",
            "state": "JOB_STATE_SUCCEEDED",
            "createTime": "2026-11-24T03:00:00Z",
            "endTime": "2026-11-24T03:10:00Z",
        }
        if value is not None:
            model = job["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"] + "/model"
            path = self.storage.path(metrics_uri(model))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"eval": {"recall_at_k": value, "ndcg_at_k": 0.1}}), encoding="utf-8")
        self.jobs[index] = job
        self.fake.add_job(job["name"], job)  # what `--follow` reads
        return job, now

    # --- the writers

    def cli(self, index: int) -> None:
        """`run_job.py jobs/recommender.yaml --env dev --follow <job>`: attaches to the scheduled run."""
        argv = [JOB_FILE, "--env", "dev", "--follow", self.jobs[index]["name"]]
        rc, out, err = run_cli(
            argv,
            outputs=self.outputs,
            factory=self.server.factory(self.root),
            code_hash=None,
            image_hash=None,
        )
        assert rc == 0, err

    def workflow(self, program: dict, index: int, now: float, new: bool, more=None) -> dict:
        """A new job: an execution of the schedule that creates it. An earlier one: the program's `register`
        subworkflow called with it, as a later execution registers an earlier run."""
        if not new:
            program = {
                **program,
                "main": {
                    "steps": [
                        {
                            "again": {
                                "call": "register",
                                "args": {"job": self.jobs[index]},
                                "result": "outcome",
                            }
                        },
                        {"done": {"return": "${outcome}"}},
                    ]
                },
            }
        job = self.jobs[index]

        def create(args: dict) -> dict:
            # The execution sends the body the job was trained from: the test's job is that run's.
            assert {k: job[k] for k in args["body"]} == args["body"]
            return job

        connectors = {
            LIST_CONNECTOR: lambda args: {},  # no earlier run to register: each step registers one job
            CREATE_CONNECTOR: create,
            LIST_VERSIONS_CONNECTOR: self.list_versions,
            GET_MODEL_CONNECTOR: self.get_model,
            UPLOAD_CONNECTOR: self.upload,
            MERGE_ALIASES_CONNECTOR: self.merge,
            READ_OBJECT_CONNECTOR: self.read_object,
            BATCH_CONNECTOR: self.batch_predict,
            **(more or {}),  # a test's own connectors (a schedule's endpoint)
        }
        env = {"GOOGLE_CLOUD_WORKFLOW_EXECUTION_ID": EXECUTION, "TENSORBOARD": self.outputs["tensorboard"]}
        return Interpreter(program, now=now, env=env, connectors=connectors).run()

    # --- the connectors, on the fake REST service run_job.py talks to

    def _call(self, method: str, name: str, query: dict | None = None, body: dict | None = None) -> dict:
        status, reply = self.fake.handle(method, f"/v1/{name}", query or {}, body)
        if status != 200:
            raise http_error(status, reply["error"]["message"])
        return reply

    def list_versions(self, args: dict) -> dict:
        return self._call("GET", f"{args['name']}:listVersions", {"filter": [args["filter"]]})

    def get_model(self, args: dict) -> dict:
        return self._call("GET", args["name"])

    def upload(self, args: dict) -> dict:
        operation = self._call("POST", f"{args['parent']}/models:upload", body=args["body"])
        done = self._call("GET", operation["name"])  # the connector waits for the operation
        if "error" in done:
            raise operation_error(done["error"]["message"], done)
        return done["response"]

    def batch_predict(self, args: dict) -> dict:
        """The BatchPredictionJob as the connector returns it once it succeeded."""
        self.batches.append(args)
        folder = args["body"]["outputConfig"]["gcsDestination"]["outputUriPrefix"] + "prediction-x"
        return {**args["body"], "name": f"{args['parent']}/batchPredictionJobs/{700 + len(self.batches)}",
                "state": "JOB_STATE_SUCCEEDED", "outputInfo": {"gcsOutputDirectory": folder}}

    def merge(self, args: dict) -> dict:
        return self._call("POST", f"{args['name']}:mergeVersionAliases", body=args["body"])

    def read_object(self, args: dict) -> bytes:
        path = self.storage.path(f"gs://{args['bucket']}/{unquote(args['object'])}")
        if not path.is_file():
            raise http_error(404, "No such object")
        return path.read_bytes()

    # --- what the registry holds

    def state(self) -> list[dict]:
        """Every version as the registry keeps it (what a writer sets, not the order it set it in)."""
        model = f"{self.run.parent}/models/{self.run.registration.model_id}"
        keep = ("versionId", "displayName", "artifactUri", "labels", "versionDescription", "containerSpec")
        return [
            {**{k: v.get(k) for k in keep}, "versionAliases": sorted(v["versionAliases"])}
            for v in self.fake.models.get(model, [])
        ]

    def holder(self, alias: str) -> str | None:
        return next((v["versionId"] for v in self.state() if alias in v["versionAliases"]), None)


def play(dev, tmp_path, mode: str) -> list[list[dict]]:
    """The table, every step by `mode` (cli, workflow) or by its own `by` (mixed): the registry after each."""
    run, program, outputs = dev
    states = []
    with FakeVertexServer(FakeVertex()) as server:
        project = Project(run, outputs, tmp_path / mode, server)
        for step in STEPS:
            new = step.job not in project.jobs
            if new:
                _, now = project.train(step.job, step.value)
            else:
                now = START + len(project.jobs) * DAY
            by = step.by if mode == "mixed" else mode
            if by in ("workflow", "both"):
                project.workflow(program, step.job, now, new)
            if by in ("cli", "both"):
                project.cli(step.job)
            state = project.state()
            assert len(state) == step.versions, (mode, step.name, state)
            assert project.holder("production") == step.production, (mode, step.name)
            # default moves with production once production moved off the first version.
            assert project.holder(DEFAULT_ALIAS) == (step.production or "1"), (mode, step.name)
            states.append(state)
    return states


def test_both_writers_leave_the_same_registry_after_every_step(dev, tmp_path, monkeypatch):
    monkeypatch.setattr(jobs.cloud.plan, "POLL_SECONDS", 0)
    by_cli, by_workflow, mixed = (play(dev, tmp_path, mode) for mode in ("cli", "workflow", "mixed"))
    for step, cli_state, workflow_state, mixed_state in zip(STEPS, by_cli, by_workflow, mixed, strict=True):
        assert cli_state == workflow_state == mixed_state, step.name
    last = mixed[-1]
    # One version per job, labelled with its id; the metric label as both write it.
    assert [v["labels"]["vertex_job"] for v in last] == [str(5000 + i) for i in range(6)]
    assert [v["labels"].get("recall_at_k") for v in last] == ["0_3", "0_32", "0_32", "0_31", None, "0_4"]
    assert all(
        re.fullmatch(
            r"trained by recommender-\S+ \(projects/\S+/customJobs/50\d\d\)", v["versionDescription"]
        )
        for v in last
    )
