"""A tuning study's report (``study``): the table, best trial, parameter importance, study.json and study.png
that ``--local`` and a Vertex AI HyperparameterTuningJob share. It reads plain trial data; each runner
converts its own trials to it (``jobs/local/report.py``, ``jobs/cloud/report.py``)."""
