"""Prediction server: serves an exported SavedModel over HTTP as Vertex AI serves a custom container.

On this machine (``run_job.py serve`` runs this with the variables Vertex AI sets)::

    python scripts/run_job.py serve /tmp/census-run/model            # http://127.0.0.1:8080
    python -m serving --model-dir /tmp/census-run/model --port 8080

    curl -s localhost:8080/health     # 503 while loading; 200 and each signature's inputs once ready
    curl -s localhost:8080/predict -d '{"instances": [{"user": "1", "k": 10}]}'      # a recommender
    curl -s localhost:8080/predict -d '{"instances": [{"item": "1", "k": 10}],
                                        "parameters": {"signature": "similar_items"}}'
    curl -s localhost:8080/predict -d "{\\"instances\\": [{\\"b64\\": \\"$(base64 -w0 rose.jpg)\\"}]}"

On Vertex AI the Model Registry entry runs ``python -m serving`` on the trainer's cpu image: the stack the
model was trained and exported with (TF 2.21 / Keras 3), every signature of the export. Vertex AI's
prebuilt TensorFlow prediction images end at TF 2.15, are no longer updated, and serve ``serving_default``
only (the recommender's ``top_k`` and ``similar_items`` would be out of reach). The model comes from
``AIP_STORAGE_URI`` (Vertex AI's gs:// copy of the Model's artifactUri), the port from ``AIP_HTTP_PORT`` and
the routes from ``AIP_HEALTH_ROUTE`` and ``AIP_PREDICT_ROUTE`` (:mod:`trainer.contract`). A gs:// (any
``scheme://``) model is first copied to a local folder with ``tf.io.gfile``, whose gs:// support is built into
TensorFlow 2.21; a local MODEL_DIR is loaded where it is.

The request is Vertex AI's: ``{"instances": [...], "parameters": {"signature": NAME}}`` (the signature
defaults to ``serving_default``; ``GET`` on the health route lists them), ``{"b64": ...}`` for bytes, and the
response ``{"predictions": [...]}``, one per instance (serving.requests). A refused request gets one line of
JSON, ``{"error": "FIELD: problem; allowed: ...", "field": FIELD}``: 400 for anything wrong in it, 404 an
unknown route, 405 the wrong method, 408 headers or body too slow, 413 a body over Vertex AI's 1.5 MB, 431
too many headers, 429 (queue full) or 503 (too many connections, still loading) with Retry-After; nothing a
request sends stops the server or returns a traceback.

The HTTP server is uvicorn with a plain ASGI application (serving.http, serving.app), held to limits by
construction: at most MAX_CONNECTIONS connections, a header deadline that trickled bytes do not extend,
first-come-first-served admission of a bounded number of requests and body bytes (the rest of a body waits
unread in the kernel), a body deadline from admission, and a bounded queue. Concurrent requests for one
signature are batched (serving.batching; --max-batch-size, --batch-timeout-ms, as TF Serving's batching),
each response its own. The model is checked by its files' metadata before it is opened (size caps, no
FIFOs: serving.model) and loaded in the background under --load-timeout; the health route answers 503 until
then, one line and a non-zero exit if it fails. SIGTERM (what Vertex AI sends) or Ctrl-C closes the listener
and idle connections, answers the requests in flight with ``Connection: close`` within STOP_GRACE_S, and
exits 0. Client faults are logged at a bounded rate.

Exit status: 0 stopped by SIGTERM/SIGINT; 1 the model failed to load for another reason or in time; 2 bad
flags, a MODEL_DIR that is missing, not a directory, no SavedModel or over a limit, or a port that cannot be
listened on (one line on stderr each).
"""
