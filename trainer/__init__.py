"""TensorFlow/Keras trainer for Vertex AI custom and hyperparameter tuning jobs.

Run it with ``python -m trainer.task --help``. Importing this package (and ``trainer.config``) never imports
TensorFlow, so job tooling can read the flag parser cheaply.
"""
