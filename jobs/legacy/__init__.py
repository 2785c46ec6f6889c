"""Legacy AI Platform Training -> this repo's job definitions (`run_job.py convert`).

``source`` reads a legacy config or submit script into one ``projects.jobs`` resource (``shell`` is the bit of
POSIX shell that takes, ``shell_*`` its parts), ``convert`` maps it onto Vertex AI and this repo's trainer
(``convert_*`` its steps, ``tables`` the legacy vocabulary), and ``render`` writes the definition with every
decision as a comment at its top.
"""
