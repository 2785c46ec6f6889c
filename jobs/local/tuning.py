"""A HyperparameterTuningJob run locally: Optuna's ask/tell driving trial subprocesses.

Vertex semantics kept: trial ids are "1", "2", ...; each trial is the trialJobSpec with
``--<parameterId>=<value>`` appended to every worker pool's args and its outputs under ``<base>/<trial_id>/``;
the metric is read from the trial's cloudml-hypertune file (last measurement, or the best one with
BEST_MEASUREMENT); maxTrialCount counts finished trials, failed ones included.

maxFailedTrialCount: the study fails once that many trials have failed (the API's "number of failed Trials
that need to be seen before failing"). For 0 the API says only that Vertex AI decides; locally the study then
fails when its first min(3, maxTrialCount) trials all fail (the code is broken), or when no trial succeeds.

The study lives in Optuna's SQLite storage ``<base>/study.db``. Ctrl-C stops the running trials (their process
groups get SIGTERM, then SIGKILL), records them as interrupted, re-queues their parameters and keeps every
finished trial; ``--resume`` continues from the storage without re-running finished trials.
"""

from __future__ import annotations

import json
import math
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from jobs import study_report
from jobs.definition.body import join
from jobs.definition.kinds import TUNING_JOB, spec_field
from jobs.definition.study import Study, grid_points
from jobs.local import capacity, environment, launcher, report, search_space, spec
from jobs.local.environment import local_job_id, slug
from jobs.local.spec import LocalRunError, TuningJob
from trainer.contract import HP_METRIC_FILE, JOB_ID, MODEL_DIR, TRIAL_ID

POLL_S = 0.1
INTERRUPTED = "interrupted"
BASE_FIELD = join(spec_field(TUNING_JOB), "baseOutputDirectory", "outputUriPrefix")


def failure_budget(study: Study) -> int:
    return study.max_failed_trials if study.max_failed_trials > 0 else min(3, study.max_trials)


def read_metric(
    path: Path, metric_id: str, goal: str, selection: str
) -> tuple[float | None, list[dict[str, float]]]:
    """The trial's objective from its hypertune file, and every measurement (step, value) in it."""
    measurements = []
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None, []
    for line in lines:
        try:
            entry = json.loads(line)
            value = float(entry[metric_id])
        except (ValueError, KeyError, TypeError):
            continue
        measurements.append({"step": int(float(entry.get("global_step", 0) or 0)), "value": value})
    if not measurements:
        return None, []
    values = [m["value"] for m in measurements]
    if selection == "BEST_MEASUREMENT":
        return (max(values) if goal == "MAXIMIZE" else min(values)), measurements
    return values[-1], measurements


@dataclass
class _Running:
    trial: Any  # optuna.Trial
    trial_id: str
    values: dict[str, Any]
    run: launcher.JobRun
    started: float
    metric_file: Path


class StudyRunner:
    def __init__(
        self,
        job: TuningJob,
        *,
        display_name: str,
        base_local: Path,
        local_root: Path,
        repo_root: Path,
        resume: bool,
        cpu_only: bool,
        stream: IO[str],
        request: dict[str, Any] | None = None,
        trainer_image: str = "",
        registry: Path | None = None,
        start_job: Callable | None = None,
    ) -> None:
        self.job = job
        self.start_job = start_job or launcher.start_job  # container.Starter runs trials in containers
        self.request = request or {}
        self.trainer_image = trainer_image
        self.registry = registry
        self.name = display_name
        self.base = base_local
        self.local_root = local_root
        self.repo_root = repo_root
        self.cpu_only = cpu_only
        self.out = stream
        self.t0 = time.monotonic()
        self._interrupted = False  # set by a SIGINT or SIGTERM while the study runs (_interrupt_handler)
        self.running: dict[int, _Running] = {}
        self.study = self._open_study(resume)
        self.threads = capacity.threads_per_replica(
            self.declared.parallel_trials * self.job.trial_job.replica_total
        )

    @property
    def declared(self) -> Study:
        """The study as the definition declares it (``self.study`` is the Optuna study that runs it)."""
        return self.job.study

    # -- storage
    def _open_study(self, resume: bool):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        db = self.base / "study.db"
        fingerprint = json.dumps(self.declared.raw, sort_keys=True)
        # Built, not formatted: a '?', '#' or '%' in the folder (legal in gs:// object names) would be read
        # as the URL's query or an escape, and put the database somewhere else.
        from sqlalchemy.engine import URL

        storage = URL.create("sqlite", database=str(db)).render_as_string(hide_password=False)
        sampler = search_space.make_sampler(self.declared)
        direction = "maximize" if self.declared.goal == "MAXIMIZE" else "minimize"
        if resume:
            if not db.exists():
                raise LocalRunError("--resume", f"no interrupted study '{self.name}' at {db}")
            study = optuna.load_study(study_name=None, storage=storage, sampler=sampler)
            self.name = study.user_attrs.get("display_name", self.name)
            if study.user_attrs.get("fingerprint") != fingerprint:
                raise LocalRunError(
                    "--resume", f"studySpec differs from the study in {db}; use the same definition"
                )
            # Resumed trials run the original trialJobSpec: a new submission's args carry a new job id.
            stored = study.user_attrs.get("request")
            if stored:
                self.job = spec.parse_tuning_job(stored, self.trainer_image)
                capacity.check(self.job.trial_job, self.declared.parallel_trials)
            study.sampler = search_space.make_sampler(self.declared, resumed_trials=len(study.trials))
            self._requeue_stale(study)
            return study
        if db.exists():
            raise LocalRunError(
                "baseOutputDirectory", f"a study already exists at {db}; pass --resume to continue it"
            )
        self.base.mkdir(parents=True, exist_ok=True)
        study = optuna.create_study(
            study_name=slug(self.name), storage=storage, sampler=sampler, direction=direction
        )
        study.set_user_attr("fingerprint", fingerprint)
        study.set_user_attr("request", self.request)
        study.set_user_attr("display_name", self.name)
        if self.registry:
            self.registry.parent.mkdir(parents=True, exist_ok=True)
            self.registry.write_text(json.dumps({"displayName": self.name, "base": str(self.base)}) + "\n")
        return study

    def _requeue_stale(self, study) -> None:
        """Trials left RUNNING by a runner killed outright: record them as interrupted, run them again."""
        from optuna.trial import TrialState

        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            study._storage.set_trial_user_attr(t._trial_id, INTERRUPTED, True)
            study.tell(t.number, state=TrialState.FAIL)
            study.enqueue_trial(t.params, skip_if_exists=False)

    # -- accounting
    def _finished(self):
        from optuna.trial import TrialState

        trials = self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL))
        return [t for t in trials if not t.user_attrs.get(INTERRUPTED)]

    def target_trials(self) -> int:
        if self.declared.algorithm == "GRID_SEARCH":
            return min(self.declared.max_trials, grid_points(self.declared.parameters))
        return self.declared.max_trials

    def _status(self) -> str:
        """Where the study stands, appended to each trial's progress line."""
        finished = self._finished()
        failed = sum(t.state.name == "FAIL" for t in finished)
        return (
            f"[{len(self.running)} running, {len(finished) - failed} done, {failed} failed; "
            f"{self.target_trials()} trials]"
        )

    def _budget_spent(self, finished) -> bool:
        failed = [t for t in finished if t.state.name == "FAIL"]
        if self.declared.max_failed_trials > 0:
            return len(failed) >= self.declared.max_failed_trials
        return len(failed) >= failure_budget(self.declared) and len(failed) == len(finished)

    # -- running
    def log(self, message: str) -> None:
        print(f"[{time.monotonic() - self.t0:7.1f}s] {message}", file=self.out, flush=True)

    def _launch(self) -> None:
        trial = self.study.ask()
        try:
            self._start(trial)
        except KeyboardInterrupt:
            # Ctrl-C between asking for the trial and starting its replicas: it must not stay RUNNING in the
            # study. Once started, it is registered at once and _stop_running stops it with the others.
            if trial.number not in self.running:
                self._interrupt(trial, "interrupted by the user")
            raise

    def _start(self, trial) -> None:
        values = search_space.suggest(trial, self.declared.parameters)
        trial_id = str(trial.number + 1)
        trial_dir = self.base / trial_id
        metric_file = environment.metric_file(trial_dir)
        trial.set_user_attr("params", values)
        trial.set_user_attr("trial_id", trial_id)
        run = self.start_job(
            self.job.trial_job,
            run_dir=trial_dir / environment.REPLICA_LOGS,
            base_local=self.base,
            local_root=self.local_root,
            repo_root=self.repo_root,
            trial_id=trial_id,
            extra_env={
                JOB_ID: local_job_id(self.name),
                TRIAL_ID: trial_id,
                HP_METRIC_FILE: str(metric_file),
            },
            extra_args=search_space.trial_args(values),
            threads=self.threads,
            cpu_only=self.cpu_only,
            field=BASE_FIELD,
        )
        self.running[trial.number] = _Running(trial, trial_id, values, run, time.monotonic(), metric_file)
        trial.set_user_attr("log", str(run.chief_log))
        shown = " ".join(f"{k}={study_report.fmt(v)}" for k, v in values.items())
        self.log(f"trial {trial_id} running: {shown} {self._status()}")

    def _collect(self, item: _Running, rc: int) -> None:
        from optuna.trial import TrialState

        duration = time.monotonic() - item.started
        trial = item.trial
        trial.set_user_attr("duration_s", round(duration, 2))
        metric, measurements = read_metric(
            item.metric_file, self.declared.metric_id, self.declared.goal, self.declared.measurement_selection
        )
        trial.set_user_attr("measurements", measurements)
        if metric is not None and not math.isfinite(metric):
            metric, item.run.failure = (
                None,
                f"reported {self.declared.metric_id}={metric}; log: {item.run.chief_log}",
            )
        if rc == 0 and metric is not None:
            trial.set_user_attr("model_dir", environment.output_dirs(self.base, item.trial_id)[MODEL_DIR])
            self.study.tell(trial, metric)
            best = self.study.best_trial
            self.log(
                f"trial {item.trial_id} done in {duration:.1f}s: {self.declared.metric_id}={metric:.4f} "
                f"(best so far: trial {best.user_attrs['trial_id']}, {best.value:.4f}) {self._status()}"
            )
            return
        reason = item.run.failure or (
            f"reported no '{self.declared.metric_id}' to {item.metric_file}; log: {item.run.chief_log}"
        )
        trial.set_user_attr("failure", reason)
        self.study.tell(trial, state=TrialState.FAIL)
        self.log(f"trial {item.trial_id} failed after {duration:.1f}s: {reason} {self._status()}")
        for line in launcher.tail(item.run.chief_log, 3):
            print(f"           | {line}", file=self.out)

    def _stop_running(self, why: str) -> None:
        for item in self.running.values():
            item.run.terminate()
            self._interrupt(item.trial, why)
            self.log(f"trial {item.trial_id} stopped ({why})")
        self.running.clear()

    def _interrupt(self, trial, why: str) -> None:
        from optuna.trial import TrialState

        trial.set_user_attr(INTERRUPTED, True)
        trial.set_user_attr("failure", why)
        self.study.tell(trial, state=TrialState.FAIL)
        # Back in the queue: a resumed study runs these parameters again first (none yet: nothing to redo).
        if trial.params:
            self.study.enqueue_trial(trial.params, skip_if_exists=False)

    def run(self) -> int:
        target = self.target_trials()
        done = self._finished()
        if done:
            self.log(f"resuming study '{self.name}': {len(done)} of {target} trials already finished")
        else:
            self.log(
                f"study '{self.name}': {target} trials, {self.declared.parallel_trials} at a time, "
                f"{self.declared.algorithm}, {self.declared.goal.lower()} {self.declared.metric_id}; "
                f"outputs in {self.base}"
            )
        if self.declared.algorithm == "GRID_SEARCH" and target < self.declared.max_trials:
            self.log(
                f"the grid has {target} points: maxTrialCount {self.declared.max_trials} is capped to it"
            )
        interrupt = self._interrupt_handler()
        previous_term = _install(signal.SIGTERM, interrupt)
        previous_int = signal.getsignal(signal.SIGINT)
        if previous_int is not signal.SIG_IGN:  # a runner started in the background keeps ignoring Ctrl-C
            _install(signal.SIGINT, interrupt)
        try:
            status = self._loop(target)
        except LocalRunError:
            # A trial's path found unsafe at launch (a symlink planted during the study): stop the others.
            self._stop_running("the study stopped on bad input")
            _install(signal.SIGTERM, previous_term)
            raise
        except KeyboardInterrupt:
            # A second Ctrl-C must not abandon the clean-up or the results: ignore it until they are written.
            _install(signal.SIGINT, signal.SIG_IGN)
            self._stop_running("interrupted by the user")
            status = 130
        try:
            return self._finish(status)
        finally:
            _install(signal.SIGTERM, previous_term)
            _install(signal.SIGINT, previous_int)

    def _interrupt_handler(self):
        """SIGINT and SIGTERM while the study runs: a clean, resumable stop. Python drops an exception raised
        while a finalizer runs ("Exception ignored in ..."), so a Ctrl-C landing there would be lost and the
        study run on (measured: 1 full suite run in 3 hung so); the flag lets the loop see it anyway."""

        def interrupt(signum, frame):
            self._interrupted = True
            raise KeyboardInterrupt

        return interrupt

    def _loop(self, target: int) -> int:
        finished = self._finished()
        while True:
            if self._budget_spent(finished):
                self._stop_running("the study failed")
                self.log(
                    f"study failed: {sum(t.state.name == 'FAIL' for t in finished)} trials failed "
                    f"(maxFailedTrialCount {self.declared.max_failed_trials or 'default'})"
                )
                return 1
            while (
                len(self.running) < self.declared.parallel_trials
                and len(finished) + len(self.running) < target
            ):
                self._launch()
            if not self.running:
                return 0 if any(t.state.name == "COMPLETE" for t in finished) else 1
            time.sleep(POLL_S)
            if self._interrupted:
                raise KeyboardInterrupt
            for number, item in list(self.running.items()):
                rc = item.run.poll()
                if rc is not None:
                    del self.running[number]
                    self._collect(item, rc)
                    finished = self._finished()

    def _finish(self, status: int) -> int:
        trials = [t for t in self.study.get_trials(deepcopy=False) if t.state.name != "WAITING"]
        summary = report.study_summary(self.name, self.declared, trials, self.base, status)
        study_report.publish(summary, self.base, self.out)
        if status == 130:
            kept = summary["counts"]["completed"] + summary["counts"]["failed"]
            print(
                f"Interrupted: {kept} finished trials are kept in {self.base / 'study.json'}. "
                "Run the same command with --resume to continue.",
                file=self.out,
            )
        return status


def _install(signum: int, handler):
    """Set a signal handler when possible (main thread only); returns the previous one, or None."""
    if handler is None:
        return None
    try:
        return signal.signal(signum, handler)
    except ValueError:  # not the main thread: signals are the caller's business
        return None


def run_study(job: TuningJob, **kwargs: Any) -> int:
    """Run (or with resume=True continue) the study; keyword arguments as for StudyRunner."""
    return StudyRunner(job, **kwargs).run()
