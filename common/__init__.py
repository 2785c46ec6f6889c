"""Helpers both infra/ and jobs/ use: the bounded reader of every input file (``reader``) and Cloud Storage's
naming rules (``gcs``). Below both layers: it imports neither, nor trainer/ or TensorFlow, only the standard
library and yaml (tests/test_layers.py checks it). A helper belongs here when infra/ and jobs/ both need it;
one that only one of them reads stays in that layer.
"""
