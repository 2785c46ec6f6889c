# The trainer image that Vertex AI runs as a custom container: containerSpec.args are trainer.task's flags.
#
#   docker build --target cpu -t IMAGE .     # also: gpu (CUDA wheels), tpu (tensorflow-tpu + libtpu)
#   docker run --rm IMAGE --model wide_deep --train-files gs://... --eval-files gs://... --job-dir gs://...
#
# On this machine `make image` (scripts/build_image.py --local cpu) builds the cpu target with Docker or
# Podman as localhost/trainer:cpu-<hash>, the content hash Cloud Build tags it with, and reuses that tag while
# the context is unchanged; where no registry answers, BASE_IMAGE is a local Debian bookworm base (below).
#
# The cpu image is also the serving image of the models it exports: a Model Registry entry's containerSpec
# runs it with command ["python", "-m", "serving"] (which replaces the ENTRYPOINT), port 8080, routes
# /predict and /health, and Vertex AI passes the model as AIP_STORAGE_URI (see serving/__init__.py). The
# server is uvicorn (with httptools) on the trainer's NumPy and TensorFlow, whose gs:// support is built in;
# only the cpu target copies serving/ and pins uvicorn, and the same TensorFlow and Keras that exported a
# model load it.
# Vertex AI's prebuilt prediction images end at TF 2.15, are no longer updated and serve only the
# serving_default signature (not the recommender's top_k and similar_items).
#
#   docker run --rm -p 8080:8080 -e AIP_STORAGE_URI=gs://BUCKET/.../model \
#       --entrypoint python IMAGE -m serving
#
# Every Python package is pinned with its hashes in docker/requirements-<target>.txt, generated from
# Pipfile.lock by scripts/image_requirements.py, so the image trains on the stack that local runs use. Pip
# downloads only those wheels (plus the one pinned sdist); nothing else is fetched while building. Data is
# not in the image: jobs read gs://.

# A fixed Python patch release and Debian release rather than the moving `3.11-slim`, pinned by digest (the
# multi-platform index of python:3.11.15-slim-trixie, as published); 3.11 is the lock's Python and 3.11.15 /
# glibc 2.41 are what scripts/image_requirements.py evaluates markers and wheel tags for. BASE_IMAGE takes
# another python:3.11 slim-like base: build_image.py --local passes the local Debian bookworm one
# (jobs/local/base_image.py, debootstrap: Python 3.11.2, glibc 2.36) where no registry can be reached; every
# pinned wheel installs there too (the newest manylinux tag among them is 2_31).
ARG BASE_IMAGE=python:3.11.15-slim-trixie@sha256:db3ff2e1800a8581e2c48a27c3995339d47bdf046da21c7627accd3d51053a93
FROM ${BASE_IMAGE} AS base

# No .pyc written at run time (the code is read-only to the trainer user) and logs reach Cloud Logging
# unbuffered. pip: no self-update check (a network call) and no warning about installing as root, which is
# deliberate here (system site-packages, before USER). PYTHONPATH: `python -m trainer.task` finds
# /app/trainer whatever working directory a job sets.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PYTHONPATH=/app

WORKDIR /app

# The trainer runs as this numeric, unprivileged user. --no-log-init keeps a high UID from growing
# /var/log/faillog into a huge sparse file.
# The lock's setuptools is installed before the variant's requirements: cloudml-hypertune is an sdist, built
# with --no-build-isolation so pip does not download an unpinned setuptools to build it.
COPY docker/requirements-build.txt /tmp/requirements-build.txt
RUN groupadd --gid 10001 trainer \
    && useradd --uid 10001 --gid 10001 --no-log-init --create-home --shell /usr/sbin/nologin trainer \
    && pip install --no-cache-dir --no-deps --require-hashes --no-build-isolation \
        -r /tmp/requirements-build.txt \
    && rm /tmp/requirements-build.txt

# Vertex AI passes containerSpec.args to this entry point (exec form: the trainer is PID 1 and gets SIGTERM
# on preemption, which it turns into a resumable stop).
ENTRYPOINT ["python", "-m", "trainer.task"]


# --- cpu: tensorflow as locked (the same wheel as local runs) ---------------------------------------------
FROM base AS cpu
COPY docker/requirements-cpu.txt /tmp/requirements-cpu.txt
RUN pip install --no-cache-dir --no-deps --require-hashes --no-build-isolation -r /tmp/requirements-cpu.txt \
    && pip check \
    && rm /tmp/requirements-cpu.txt
COPY trainer/ /app/trainer/
COPY serving/ /app/serving/
USER 10001:10001


# --- gpu: the same tensorflow plus its and-cuda wheels (CUDA, cuDNN, NCCL as nvidia-* packages) -----------
FROM base AS gpu
# Where the NVIDIA runtime on Vertex AI / GKE mounts the host's driver (libcuda) and nvidia-smi; the
# nvidia/cuda images set the same, python:slim does not.
ENV LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib \
    PATH=/usr/local/nvidia/bin:$PATH \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
COPY docker/requirements-gpu.txt /tmp/requirements-gpu.txt
RUN pip install --no-cache-dir --no-deps --require-hashes --no-build-isolation -r /tmp/requirements-gpu.txt \
    && pip check \
    && rm /tmp/requirements-gpu.txt
COPY trainer/ /app/trainer/
USER 10001:10001


# --- tpu: tensorflow-tpu (no 2.21 exists) with the libtpu it requires ------------------------------------
FROM base AS tpu
COPY docker/requirements-tpu.txt /tmp/requirements-tpu.txt
RUN pip install --no-cache-dir --no-deps --require-hashes --no-build-isolation -r /tmp/requirements-tpu.txt \
    && pip check \
    && rm /tmp/requirements-tpu.txt
COPY trainer/ /app/trainer/
USER 10001:10001
