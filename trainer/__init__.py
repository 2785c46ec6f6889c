"""TensorFlow/Keras trainer for Vertex AI custom and hyperparameter tuning jobs.

Run it with ``python -m trainer.task --help``. Importing this package (and ``trainer.config``) never imports
TensorFlow, so job tooling can read the flag parser cheaply.

The top level is what every ``--model`` shares: the entry point (``task``), the generic training loop
(``train``), flags (``config``), the runtime contract with the job tooling (``contract``, ``env``), sharding,
callbacks, export, version shims (``compat``), the shared file readers (``input_files``), the CSV readers
(``csv_schema``, ``csv_rows``, ``csv_scan``, ``csv_dataset``) and the on-disk cache of pre-training results
(``result_cache``).
Each model's own code is a package under ``trainer/models/``, registered in :mod:`trainer.models` against the
interface of :mod:`trainer.models.base`.
"""
