"""Run a compiled Vertex AI job on this machine: ``scripts/run_job.py JOB_FILE --local [--resume]``.

``run.py`` is the entry (``run_local``: checks, staging, then one job or a study); ``spec.py`` reads the
compiled body into typed values, ``environment.py`` is the per-replica runtime contract and the gs:// mapping,
``capacity.py`` what this machine can run at once, ``launcher.py`` the replica processes, ``tuning.py``,
``search_space.py`` and ``report.py`` a study on Optuna with Vertex StudySpec semantics. With ``--container``
the replicas (and ``serve``'s server) run in the trainer image instead: ``container_plan.py`` plans the
containers, ``container.py`` runs them with the engine of ``engine.py`` on the image of ``trainer_image.py``.
"""
