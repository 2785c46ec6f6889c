"""Job definitions (jobs/*.yaml) and the code that validates them, compiles them into Vertex AI requests and
submits them. Entry point: ``python scripts/run_job.py JOB_FILE [--dry-run | --local]``.

Modules, in the order a run uses them: ``loader`` (strict YAML) -> ``overrides`` (--set) -> ``references``
(${infra.*}, ${job.*}) -> ``compile`` (the pure definition -> request function) -> ``validate`` (the real
aiplatform_v1 schema via ``schema``/``vertex_types``, ``machines``, ``trainer_contract``, the images in
``image``) -> ``plan`` (steps, executed through the one SDK factory in ``cloud``: the trainer image builds of
``builds``, the trainer sdist from ``package``). ``body`` is the one reader of a compiled body they all use;
``local`` runs a compiled job on this machine; ``build_cli`` is scripts/build_image.py; ``legacy`` and
``convert_cli`` are `run_job.py convert` (legacy AI Platform Training -> a definition). Importing this package
imports nothing heavy.
"""
