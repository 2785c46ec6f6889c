"""Check a REST body against the real Vertex AI message descriptors, reporting the field path.

``json_format.ParseDict`` is the authority (it is what the client library does with the same JSON), but its
messages name a path only for some errors and never list what is allowed. So the body is first walked along
the message descriptor: an unknown field lists the fields of that message, a bad enum lists the enum's values,
a wrong JSON type names the expected one. ParseDict then runs as the final word.
"""

from __future__ import annotations

import re
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from jobs.definition.body import DURATION
from jobs.definition.errors import FieldError, one_of, short
from jobs.definition.loader import join

_INTS = {
    FieldDescriptor.TYPE_INT32,
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_SINT32,
    FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED32,
    FieldDescriptor.TYPE_FIXED64,
    FieldDescriptor.TYPE_SFIXED32,
    FieldDescriptor.TYPE_SFIXED64,
}
_FLOATS = {FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT}

# Set by the service, never by a request; ParseDict accepts them, the API ignores or rejects them.
OUTPUT_ONLY = (
    "name",
    "state",
    "createTime",
    "startTime",
    "endTime",
    "updateTime",
    "error",
    "trials",
    "webAccessUris",
    "satisfiesPzs",
    "satisfiesPzi",
)


class SchemaError(FieldError):
    """A field the Vertex AI message type would not accept, at its body path."""


def check_message(body: Any, message_class: type) -> None:
    """Raise SchemaError for the first thing in ``body`` the message type would not accept."""
    descriptor = message_class()._pb.DESCRIPTOR
    if not isinstance(body, dict):
        raise SchemaError("", f"expected a mapping for {descriptor.name}", "a YAML mapping")
    for key in OUTPUT_ONLY:
        if key in body:
            raise SchemaError(
                key, "is set by Vertex AI (output only), not by a request", "remove it from the definition"
            )
    _walk(body, descriptor, "")
    try:
        json_format.ParseDict(body, message_class()._pb)
    except json_format.ParseError as exc:
        raise SchemaError(_parse_error_path(str(exc)), _first_line(str(exc))) from None


def _walk(value: dict, descriptor: Descriptor, path: str) -> None:
    fields = descriptor.fields_by_camelcase_name
    oneofs: dict[str, str] = {}
    for key, item in value.items():
        field = fields.get(key) or descriptor.fields_by_name.get(key)
        where = join(path, key)
        if field is None:
            raise SchemaError(where, f"unknown field for {descriptor.name}", one_of(sorted(fields)))
        group = field.containing_oneof
        if group is not None and item is not None:
            if group.name in oneofs:
                members = [f.json_name for f in group.fields]
                raise SchemaError(
                    path,
                    f"sets both {oneofs[group.name]} and {key}, which exclude each other",
                    "exactly one of " + one_of(members),
                )
            oneofs[group.name] = key
        if item is None:
            # `field:` with nothing after it: almost always a value lost in editing, never a useful null.
            raise SchemaError(where, "the field has no value", "a value, or remove the field")
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            if not isinstance(item, dict):
                raise SchemaError(where, "expected a mapping", "key: value pairs")
            value_field = field.message_type.fields_by_name["value"]
            for k, v in item.items():
                _check_scalar(v, value_field, join(where, k))
        elif _is_repeated(field):
            if not isinstance(item, list):
                raise SchemaError(where, "expected a list", "a YAML list (- item)")
            for i, element in enumerate(item):
                _check_value(element, field, join(where, i))
        else:
            _check_value(item, field, where)


def _check_value(item: Any, field: FieldDescriptor, where: str) -> None:
    message = field.message_type
    if message is None:
        _check_scalar(item, field, where)
    elif message.full_name == "google.protobuf.Duration":
        if not (isinstance(item, str) and DURATION.fullmatch(item)):
            raise SchemaError(
                where, f"not a duration: {short(item)}", "seconds with an 's' suffix, e.g. 7200s"
            )
    elif message.full_name.startswith("google.protobuf."):
        return  # Struct/Value/Timestamp/wrappers: ParseDict's rules apply
    elif not isinstance(item, dict):
        raise SchemaError(
            where,
            f"expected a mapping ({message.name}), got {type(item).__name__}",
            one_of(sorted(message.fields_by_camelcase_name)),
        )
    else:
        _walk(item, message, where)


def _check_scalar(item: Any, field: FieldDescriptor, where: str) -> None:
    kind = field.type
    if field.enum_type is not None:
        names = [v.name for v in field.enum_type.values]
        if item not in names:
            raise SchemaError(where, f"invalid value {short(item)} for {field.enum_type.name}", one_of(names))
    elif kind in _INTS:
        ok = (isinstance(item, int) and not isinstance(item, bool)) or (
            isinstance(item, str) and re.fullmatch(r"-?\d+", item)
        )
        if not ok:
            raise SchemaError(where, f"expected an integer, got {short(item)}", "a whole number")
    elif kind in _FLOATS:
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            raise SchemaError(where, f"expected a number, got {short(item)}", "a number")
    elif kind == FieldDescriptor.TYPE_BOOL:
        if not isinstance(item, bool):
            raise SchemaError(where, f"expected true or false, got {short(item)}", "true, false")
    elif kind == FieldDescriptor.TYPE_STRING:
        if not isinstance(item, str):
            raise SchemaError(where, f"expected a string, got {short(item)}", "a string (quote it in YAML)")


def _parse_error_path(message: str) -> str:
    found = re.search(r" at (?:[A-Za-z]+)\.([\w.\[\]]+?)\.*(?:\s|$)", message)
    if found:
        return re.sub(r"\[(\d+)\]", r".\1", found.group(1))
    return ".".join(re.findall(r"Failed to parse (\w+) field", message))


def _first_line(message: str) -> str:
    message = re.sub(r"Failed to parse \w+ field: ", "", message.splitlines()[0])
    return re.sub(r" at [\w.\[\]]+\.*$", "", message).rstrip(".")


def _is_repeated(field: FieldDescriptor) -> bool:
    # protobuf 6+ has is_repeated; `label` is gone from the upb descriptors.
    repeated = getattr(field, "is_repeated", None)
    if repeated is not None:
        return bool(repeated() if callable(repeated) else repeated)
    return field.label == FieldDescriptor.LABEL_REPEATED
