"""Moved to common/reader.py. This stand-in stays only while jobs/legacy/source.py, edited on another branch,
imports ``from infra import reader``; delete it once that line reads ``from common import reader``."""

from common.reader import MAX_NUMBER_CHARS, InputError, plain_json, shown

__all__ = ["MAX_NUMBER_CHARS", "InputError", "plain_json", "shown"]
