"""docs/reference/grpc.md: the gRPC API from the protos' descriptors and comments.

`buf build` (as `scripts/gen.sh` runs it) writes a descriptor set with source info, so every
service, method, message, field, enum and value keeps its leading comment; HTTP bindings come
from the `google.api.http` option."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from google.api import annotations_pb2  # noqa: F401 - registers the google.api.http extension
from google.protobuf import descriptor_pb2

from scripts.docs_gen.md import GENERATED, anchor, cell, code, prose, table

_PACKAGE = "mesh."
_TYPE_NAMES = {v: k[len("TYPE_"):].lower() for k, v in
               descriptor_pb2.FieldDescriptorProto.Type.items()}
_MESSAGE, _ENUM, _SERVICE = 4, 5, 6          # FileDescriptorProto field numbers
_FIELD, _NESTED, _NESTED_ENUM, _METHOD, _VALUE = 2, 3, 4, 2, 2


def descriptor_set(root: Path) -> descriptor_pb2.FileDescriptorSet:
    """The protos compiled by buf with source info (comments)."""
    with tempfile.TemporaryDirectory() as folder:
        image = Path(folder) / "image.binpb"
        subprocess.run([str(root / ".venv" / "bin" / "buf"), "build", "-o", str(image),
                        "--as-file-descriptor-set"], cwd=root, check=True)
        return descriptor_pb2.FileDescriptorSet.FromString(image.read_bytes())


def _comments(file: descriptor_pb2.FileDescriptorProto) -> dict[tuple[int, ...], str]:
    return {tuple(location.path): (location.leading_comments or location.trailing_comments)
            for location in file.source_code_info.location}


def _type_link(name: str, known: set[str]) -> str:
    name = name.lstrip(".")
    if name in known:
        return f"[{code(name.rsplit('.', 1)[-1])}](#{anchor(name)})"
    return code(name)


def _field_type(field: descriptor_pb2.FieldDescriptorProto, known: set[str],
                maps: dict[str, tuple[str, str]]) -> str:
    if field.type_name.lstrip(".") in maps:
        key, value = maps[field.type_name.lstrip(".")]
        return f"map&lt;{key}, {value}&gt;"
    kind = (_type_link(field.type_name, known) if field.type_name
            else code(_TYPE_NAMES[field.type]))
    if field.label == descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED:
        return f"repeated {kind}"
    if field.proto3_optional:
        return f"optional {kind}"
    return kind


def _http(method: descriptor_pb2.MethodDescriptorProto) -> list[str]:
    rule = method.options.Extensions[annotations_pb2.http]
    rules = [rule, *rule.additional_bindings] if rule.WhichOneof("pattern") else []
    out = []
    for item in rules:
        verb = item.WhichOneof("pattern")
        path = item.custom.path if verb == "custom" else getattr(item, verb)
        body = f" (body `{item.body}`)" if item.body else ""
        out.append(f"`{verb.upper()} {path}`{body}")
    return out


def _services(file, comments, known) -> list[str]:
    out = []
    for i, service in enumerate(file.service):
        full = f"{file.package}.{service.name}"
        out += [f"## {full} {{ #{anchor(full)} }}", "", prose(comments.get((_SERVICE, i), "")), ""]
        for j, method in enumerate(service.method):
            stream_in = "stream " if method.client_streaming else ""
            stream_out = "stream " if method.server_streaming else ""
            heading_id = anchor(f"{full}.{method.name}")
            out += [f"### {service.name}.{method.name} {{ #{heading_id} }}", "",
                    f"`rpc {method.name}({stream_in}{method.input_type.lstrip('.')}) returns "
                    f"({stream_out}{method.output_type.lstrip('.')})`", ""]
            out += [f"- request: {_type_link(method.input_type, known)}",
                    f"- response: {_type_link(method.output_type, known)}"]
            out += [f"- HTTP: {binding}" for binding in _http(method)]
            out += ["", prose(comments.get((_SERVICE, i, _METHOD, j), "")), ""]
    return out


def _enum(enum, path, prefix, comments) -> list[str]:
    full = f"{prefix}.{enum.name}"
    rows = [[code(value.name), str(value.number),
             cell(comments.get((*path, _VALUE, k), ""))] for k, value in enumerate(enum.value)]
    return [f"### {full} {{ #{anchor(full)} }}", "", prose(comments.get(path, "")), "",
            table(["value", "number", "description"], rows), ""]


def _maps(message, prefix) -> dict[str, tuple[str, str]]:
    out = {}
    for nested in message.nested_type:
        if nested.options.map_entry:
            key, value = nested.field
            out[f"{prefix}.{message.name}.{nested.name}"] = (
                _TYPE_NAMES[key.type], value.type_name.lstrip(".").rsplit(".", 1)[-1]
                if value.type_name else _TYPE_NAMES[value.type])
    return out


def _message(message, path, prefix, comments, known) -> list[str]:
    full = f"{prefix}.{message.name}"
    maps = _maps(message, prefix)
    rows = []
    for k, field in enumerate(message.field):
        oneof = (f" (oneof `{message.oneof_decl[field.oneof_index].name}`)"
                 if field.HasField("oneof_index") and not field.proto3_optional else "")
        rows.append([code(field.json_name if field.json_name else field.name) + " / " +
                     code(field.name), _field_type(field, known, maps) + oneof, str(field.number),
                     cell(comments.get((*path, _FIELD, k), ""))])
    out = [f"### {full} {{ #{anchor(full)} }}", "", prose(comments.get(path, "")), ""]
    out += [table(["field (JSON / proto)", "type", "number", "description"], rows) if rows
            else "No fields.", ""]
    for k, nested in enumerate(message.nested_type):
        if not nested.options.map_entry:
            out += _message(nested, (*path, _NESTED, k), full, comments, known)
    for k, enum in enumerate(message.enum_type):
        out += _enum(enum, (*path, _NESTED_ENUM, k), full, comments)
    return out


def _known(files) -> set[str]:
    names: set[str] = set()

    def walk(prefix, messages, enums):
        for message in messages:
            names.add(f"{prefix}.{message.name}")
            walk(f"{prefix}.{message.name}", message.nested_type, message.enum_type)
        names.update(f"{prefix}.{enum.name}" for enum in enums)
    for file in files:
        walk(file.package, file.message_type, file.enum_type)
    return names


def _contents(files) -> list[str]:
    rows = []
    for file in files:
        for service in file.service:
            full = f"{file.package}.{service.name}"
            methods = ", ".join(f"[{m.name}](#{anchor(full + '.' + m.name)})"
                                for m in service.method)
            rows.append([f"[{code(full)}](#{anchor(full)})", methods])
    return [table(["service", "methods"], rows), ""]


def page(root: Path) -> str:
    """The whole page."""
    files = sorted((f for f in descriptor_set(root).file if f.package.startswith(_PACKAGE)),
                   key=lambda f: f.name)
    known = _known(files)
    out = [GENERATED.format(source="protos/ (buf build, with source info)"), "",
           "# gRPC API", "",
           "Every service of the mesh, from `protos/` and its comments. Only "
           "`mesh.orchestrator.v1` is public; the other services answer the mesh alone (the "
           "orchestrator, and callers holding the mesh token). Field names are given as the JSON "
           "mapping spells them (REST, grpcurl) and as the proto does. HTTP bindings are served "
           "by the orchestrator's REST front ([REST API](rest.md)).", ""]
    out += _contents(files)
    for file in files:
        comments = _comments(file)
        out += [f"## File {code(file.name)}", ""]
        out += _services(file, comments, known)
        for i, message in enumerate(file.message_type):
            out += _message(message, (_MESSAGE, i), file.package, comments, known)
        for i, enum in enumerate(file.enum_type):
            out += _enum(enum, (_ENUM, i), file.package, comments)
    return "\n".join(out).rstrip() + "\n"
