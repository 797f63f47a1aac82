"""docs/reference/settings.md: every setting of every service, from its pydantic-settings class.

Each row is one field: its environment variable (the service's prefix and the field's name in
capitals, or the alias the field reads), its type, its default and its description (the
attribute's docstring, as the settings modules write them, or the field's `description`)."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import typing
from enum import Enum

from pydantic import SecretStr
from pydantic_core import PydanticUndefined

from libs.services import SERVICES
from scripts.docs_gen.md import GENERATED, cell, code, table


def attribute_docstrings(cls: type) -> dict[str, str]:
    """{field: docstring} of the string literals right after annotated assignments in `cls`
    and its bases (a base's docstring is overridden by a subclass's)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        try:
            tree = ast.parse(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, after in zip(body, body[1:], strict=False):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)):
                docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs


def _type_name(annotation: object) -> str:
    if isinstance(annotation, type) and not typing.get_args(annotation):
        if issubclass(annotation, Enum):
            return " \\| ".join(repr(m.value) for m in annotation)
        return annotation.__name__
    text = repr(annotation).replace("typing.", "").replace("pathlib.", "")
    text = text.replace("pydantic.types.", "").replace("NoneType", "None")
    for prefix in ("libs.", "services."):
        while prefix in text:
            start = text.index(prefix)
            end = start
            while end < len(text) and (text[end].isalnum() or text[end] in "._"):
                end += 1
            text = text[:start] + text[start:end].rsplit(".", 1)[-1] + text[end:]
    return text


def _factory(factory: typing.Callable[[], object]) -> str | None:
    """The expression of a lambda default factory (`len(os.sched_getaffinity(0))`), or None."""
    try:
        tree = ast.parse(inspect.getsource(factory).strip())
    except (OSError, TypeError, SyntaxError):
        return None
    lambdas = [node for node in ast.walk(tree) if isinstance(node, ast.Lambda)]
    return ast.unparse(lambdas[0].body) if lambdas else None


def _default(field) -> str:
    if field.default_factory is not None:
        expression = _factory(field.default_factory)
        if expression is not None:
            return "computed at start-up: " + code(expression)
        value = field.default_factory()
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if isinstance(value, SecretStr):
        return "(secret)"
    if isinstance(value, Enum):
        value = value.value
    if value is None:
        return "unset"
    try:
        rendered = json.dumps(value, default=str)
    except TypeError:
        rendered = str(value)
    return code(rendered)


def _variable(prefix: str, name: str, field) -> str:
    alias = field.validation_alias
    choices = getattr(alias, "choices", None)
    if choices:
        return choices[0] if isinstance(choices[0], str) else prefix + name.upper()
    if isinstance(alias, str):
        return alias
    return prefix + name.upper()


def rows(cls: type) -> list[list[str]]:
    """One table row per field of the settings class `cls`."""
    prefix = cls.model_config.get("env_prefix", "")
    docs = attribute_docstrings(cls)
    out = []
    for name, field in cls.model_fields.items():
        description = docs.get(name) or field.description or ""
        out.append([code(_variable(prefix, name, field)), cell(_type_name(field.annotation)),
                    _default(field), cell(description)])
    return out


def page() -> str:
    """The whole page."""
    out = [GENERATED.format(source="the settings classes of libs/services.py"), "",
           "# Settings", "",
           "Every service reads one frozen pydantic-settings object from its environment once, at "
           "start-up (`mcts-mesh serve SERVICE`, or `mcts-mesh up` for all five), and prints it "
           "with secrets masked. Lists and maps are given as JSON "
           "(`ORCHESTRATOR_REST_ALLOWED_ORIGINS='[\"https://app.example\"]'`). `mcts-mesh up` sets "
           "the ports, the mesh token and the addresses between the services itself. "
           "[Configure](../guides/configuration.md) explains the settings that change behaviour.",
           ""]
    for service in SERVICES:
        module, _, name = service.settings_class.partition(":")
        cls = getattr(importlib.import_module(module), name)
        out += [f"## {service.name}", "",
                f"`{cls.__module__}.{cls.__name__}`, variables prefixed `{service.env_prefix}`.",
                "", table(["variable", "type", "default", "description"], rows(cls)), ""]
    return "\n".join(out)


def undocumented() -> list[str]:
    """The environment variables of every setting that has no description."""
    out = []
    for service in SERVICES:
        module, _, name = service.settings_class.partition(":")
        cls = getattr(importlib.import_module(module), name)
        docs = attribute_docstrings(cls)
        prefix = cls.model_config.get("env_prefix", "")
        out += [_variable(prefix, field_name, field)
                for field_name, field in cls.model_fields.items()
                if not (docs.get(field_name) or field.description)]
    return out
