"""Job definitions (jobs/*.yaml) and the code that validates them, compiles them into Vertex AI requests, and
runs them on Vertex AI or on this machine. Entry point: ``python scripts/run_job.py JOB_FILE [--dry-run |
--local]``; as a library, ``jobs.api``.

Layers, each importing only those above it in this list (tests/jobs/test_layers.py checks it):

- ``definition/``: the definition model, pure and offline: ``kinds`` (the job kinds' table), ``errors``,
  ``loader`` (strict YAML) -> ``overrides`` (--set) -> ``references`` (${infra.*}, ${job.*}) -> ``compile``
  (definition -> request) -> ``validate`` (the aiplatform_v1 schema via ``schema``/``vertex_types``,
  ``study`` (a StudySpec, typed), ``machines``, ``trainer_spec``, the images and tags of ``image``,
  the sdist of ``package``); ``body`` is the one reader of a compiled body; ``deployment`` the rules of
  deploying a registered version to an endpoint (``run_job.py deploy``, a definition's ``deploy:`` block);
  ``experiments`` a run as a Vertex AI Experiments run (its ids, requests, and ``run_job.py runs``' table).
- ``study_report``: a tuning study's report (table, best trial, parameter importance, study.json, study.png)
  from plain trial data, the one report both runners below write.
- ``console``: a single run's console: the trainer's progress lines rendered compact, and a run's closing
  lines (eval metrics beside the model folder, baselines), the same for both runners below and the reports.
- ``cloud/``: the cloud runner: ``plan`` (steps, executed through the SDK clients of ``client``), the
  trainer image builds of ``builds``, the report of a job on Vertex AI (``report``), registering
  (``register``) and deploying (``deploy``) its model, recording it in Vertex AI Experiments
  (``experiments``).
- ``local/``: the local runner (``local.run.run_local``), Optuna studies with Vertex semantics, the local
  Experiments store (``local.experiments``).
- ``legacy/``: legacy AI Platform Training -> a definition (``run_job.py convert``).
- ``api``: the library entry point the command lines, synthesis and tests call.
- ``schedule``: an environment's schedules compiled for synthesis (scripts/synth.py).
- ``cli/``: the command lines (run_job.py, its ``convert``, ``report``, ``runs``, ``serve`` and
  ``deploy``/``undeploy``/``rollback`` verbs, build_image.py),
  which reach the layers above only through ``api``; nothing imports them but scripts/ and tests.

Every layer may import what lies below jobs/: ``common/`` (helpers infra/ uses too) and the data contracts
of infra/ and trainer/ (tests/test_layers.py). jobs/README.md's "Where new code goes" says where a new kind,
verb or helper goes.

Importing this package imports nothing heavy.
"""
