"""Path templates of `google.api.http` rules, parsed and matched as grpc-gateway v2 does.

Grammar (google/api/http.proto):

    Template = "/" Segments [ Verb ] ;
    Segments = Segment { "/" Segment } ;
    Segment  = "*" | "**" | LITERAL | Variable ;
    Variable = "{" FieldPath [ "=" Segments ] "}" ;
    FieldPath = IDENT { "." IDENT } ;
    Verb     = ":" LITERAL ;

`{thread_id}` is `{thread_id=*}`: one path segment. `**` matches zero or more segments; as in
grpc-gateway's `runtime.Pattern` at most one `**` is allowed, and literal or `*` segments may follow
it (they are matched from the end of the path). The verb is split off the last segment as
grpc-gateway's `httprule` tokenizer does: after a closing `}` at the first `:`, otherwise at the
last `:`.

Matching works on the request path split at "/" after percent-decoding (grpc-gateway v2's default
`UnescapingModeLegacy`), with the verb split off the last component only when it ends in `":" +
verb` of the template being tried (grpc-gateway's `ServeMux.ServeHTTP`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# RFC 3986 pchar without ":" (a colon ends a segment's literal only in the verb position, and
# grpc-gateway accepts colons inside literals, so ":" is allowed too).
_LITERAL = re.compile(r"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@]|%[0-9A-Fa-f]{2})+\Z")


class TemplateError(ValueError):
    """A path template that does not follow the grammar; the message says where."""


class SegmentKind(Enum):
    LITERAL = "literal"
    WILDCARD = "*"
    DEEP_WILDCARD = "**"


@dataclass(frozen=True)
class Segment:
    kind: SegmentKind
    literal: str = ""


@dataclass(frozen=True)
class Variable:
    """A captured field: `field_path` ("thread_id" or ("parent", "name")) bound to the segments
    `segments[start:end]` of the template."""

    field_path: tuple[str, ...]
    start: int
    end: int

    @property
    def name(self) -> str:
        return ".".join(self.field_path)


@dataclass(frozen=True)
class PathTemplate:
    """A parsed template: flat segments, the variables over them, and the verb ("" when none)."""

    template: str
    segments: tuple[Segment, ...]
    variables: tuple[Variable, ...]
    verb: str

    def match(self, components: list[str], verb: str) -> dict[str, str] | None:
        """The variables' values when `components` (the decoded path without its leading "/", split
        at "/") and `verb` match this template, else None. A variable over several segments gets
        them joined by "/"."""
        if verb != self.verb:
            return None
        if not self.segments:
            return {} if components == [""] else None
        values: list[str] = []
        position = 0
        for index, segment in enumerate(self.segments):
            if segment.kind is SegmentKind.DEEP_WILDCARD:
                end = len(components) - (len(self.segments) - index - 1)
                if end < position:
                    return None
                values.append("/".join(components[position:end]))
                position = end
                continue
            if position >= len(components):
                return None
            component = components[position]
            if segment.kind is SegmentKind.LITERAL and component != segment.literal:
                return None
            values.append(component)
            position += 1
        if position != len(components):
            return None
        return {variable.name: "/".join(values[variable.start:variable.end])
                for variable in self.variables}

    def openapi_path(self) -> str:
        """The template in OpenAPI form, the verb kept: a variable over one `*` becomes
        `{field.path}`; a variable over a sub-template keeps its literals and gets one parameter
        per wildcard (see `openapi_parameters`), since an OpenAPI path parameter holds no "/"
        and `/v1/{name=collections/*}` and `/v1/{name=collections/*/documents/**}` would both
        be `/v1/{name}`."""
        path = "/" + "/".join(part for part, _ in self._openapi_parts())
        return f"{path}:{self.verb}" if self.verb else path

    def openapi_parameters(self) -> list[tuple[str, Variable]]:
        """(name, variable) of each parameter of `openapi_path()`, in order: the variable's own
        name for a one-segment variable; else each wildcard's, named after the literal before it
        ("collections/*" -> "collection") or `<name>_<n>` when none precedes it, made unique."""
        return [(part[1:-1], variable) for part, variable in self._openapi_parts()
                if variable is not None]

    def _openapi_parts(self) -> list[tuple[str, Variable | None]]:
        parts: list[tuple[str, Variable | None]] = []
        taken: set[str] = set()
        index = 0
        starts = {variable.start: variable for variable in self.variables}
        while index < len(self.segments):
            variable = starts.get(index)
            if variable is None:
                segment = self.segments[index]
                parts.append((segment.literal or segment.kind.value, None))
                index += 1
                continue
            index = variable.end
            inner = self.segments[variable.start:variable.end]
            if len(inner) == 1 and inner[0].kind is SegmentKind.WILDCARD:
                parts.append(("{" + variable.name + "}", variable))
                continue
            for position, segment in enumerate(inner):
                if segment.kind is SegmentKind.LITERAL:
                    parts.append((segment.literal, None))
                    continue
                before = inner[position - 1].literal if position else ""
                name = _singular(before)
                name = name or f"{variable.name}_{position}"
                while name in taken:
                    name += "_"
                taken.add(name)
                parts.append(("{" + name + "}", variable))
        return parts


def _singular(plural: str) -> str:
    """A collection's resource word: "collections" -> "collection", "batches" -> "batch"."""
    if plural.endswith(("ches", "shes", "sses", "xes")):
        return plural[:-2]
    return plural[:-1] if plural.endswith("s") and len(plural) > 1 else plural


def parse_template(template: str) -> PathTemplate:
    """Parses a `google.api.http` path template.

    Raises:
        TemplateError: no leading "/", an empty segment, a bad literal or field path, a nested or
            unterminated variable, a repeated variable, more than one "**", or an empty verb.
    """
    if not template.startswith("/"):
        raise TemplateError(f"{template!r}: no leading /")
    body, verb = _split_verb(template)
    if verb is not None and not _LITERAL.match(verb):
        raise TemplateError(f"{template!r}: bad verb {verb!r}")
    segments: list[Segment] = []
    variables: list[Variable] = []
    if body != "/":
        for part in _split_top_level(body[1:], template):
            if part.startswith("{"):
                variables.append(_parse_variable(part, len(segments), segments, template))
            else:
                segments.append(_parse_segment(part, template))
    names = [variable.name for variable in variables]
    if len(set(names)) != len(names):
        raise TemplateError(f"{template!r}: a variable is bound twice")
    if sum(segment.kind is SegmentKind.DEEP_WILDCARD for segment in segments) > 1:
        raise TemplateError(f"{template!r}: more than one '**'")
    return PathTemplate(template, tuple(segments), tuple(variables), verb or "")


def _split_verb(template: str) -> tuple[str, str | None]:
    """Splits `template` into (path, verb) as grpc-gateway's tokenizer does."""
    depth = 0
    boundary = 0
    after_variable = False
    for index, char in enumerate(template):
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                boundary, after_variable = index, True
        elif char == "/" and depth == 0:
            boundary, after_variable = index, False
    if depth != 0:
        raise TemplateError(f"{template!r}: unbalanced braces")
    tail = template[boundary + 1:]
    colon = tail.find(":") if after_variable else tail.rfind(":")
    if colon < 0:
        return template, None
    verb = tail[colon + 1:]
    if not verb:
        raise TemplateError(f"{template!r}: empty verb")
    return template[:boundary + 1 + colon], verb


def _split_top_level(path: str, template: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    current = ""
    for char in path:
        if char == "{":
            if depth:
                raise TemplateError(f"{template!r}: nested variables are not allowed")
            depth += 1
        elif char == "}":
            depth -= 1
        if char == "/" and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return parts


def _parse_segment(part: str, template: str) -> Segment:
    if part == "*":
        return Segment(SegmentKind.WILDCARD)
    if part == "**":
        return Segment(SegmentKind.DEEP_WILDCARD)
    if not part:
        raise TemplateError(f"{template!r}: empty segment")
    if not _LITERAL.match(part):
        raise TemplateError(f"{template!r}: bad literal {part!r}")
    return Segment(SegmentKind.LITERAL, part)


def _parse_variable(part: str, start: int, segments: list[Segment], template: str) -> Variable:
    if not part.endswith("}"):
        raise TemplateError(f"{template!r}: text after a variable in one segment: {part!r}")
    inner = part[1:-1]
    field, _, pattern = inner.partition("=")
    field_path = tuple(field.split("."))
    if not all(_IDENT.match(name) for name in field_path):
        raise TemplateError(f"{template!r}: bad field path {field!r}")
    if "=" in inner and not pattern:
        raise TemplateError(f"{template!r}: empty pattern for {field!r}")
    for piece in (pattern or "*").split("/"):
        if piece.startswith("{"):
            raise TemplateError(f"{template!r}: nested variables are not allowed")
        segments.append(_parse_segment(piece, template))
    return Variable(field_path, start, len(segments))
