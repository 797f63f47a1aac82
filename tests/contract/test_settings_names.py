"""One name per setting everywhere: every variable the launcher, compose and the k8s manifests (the
base and every overlay) set is a field of that service's settings object (or the standard
OTEL_EXPORTER_OTLP_ENDPOINT); Deployments of other software (Jaeger, Redis) are not checked."""

from __future__ import annotations

import yaml

from libs.services import BY_NAME
from mcts_mesh.cli.serve import SERVICE_ENTRY, load

STANDARD = {"OTEL_EXPORTER_OTLP_ENDPOINT"}


def _fields(service: str) -> set[str]:
    settings_cls = load(SERVICE_ENTRY[service][0])
    prefix = BY_NAME[service].env_prefix
    return {prefix + name.upper() for name in settings_cls.model_fields}


def _check(service: str, names: set[str]) -> None:
    unknown = {n for n in names if n not in STANDARD} - _fields(service)
    assert not unknown, f"{service}: variables that are no setting: {sorted(unknown)}"


def test_compose_variables_are_settings(repo_root):
    compose = yaml.safe_load((repo_root / "deploy" / "compose.yaml").read_text())
    checked = set()
    for name, spec in compose["services"].items():
        service = name
        if service in SERVICE_ENTRY:
            _check(service, set(spec.get("environment", {})))
            checked.add(service)
    assert checked == set(SERVICE_ENTRY)


def test_k8s_variables_are_settings(repo_root):
    checked = set()
    for path in sorted((repo_root / "deploy" / "k8s").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "Deployment":
                service = doc["metadata"]["name"]
                if service not in SERVICE_ENTRY:
                    continue
                for container in doc["spec"]["template"]["spec"]["containers"]:
                    _check(service, {e["name"] for e in container.get("env", [])})
                checked.add(service)
    assert checked == set(SERVICE_ENTRY)


def test_launcher_variables_are_settings():
    for service, prefix in ((name, s.env_prefix) for name, s in BY_NAME.items()):
        assert f"{prefix}PORT" in _fields(service)
        assert f"{prefix}MESH_TOKEN" in _fields(service)  # the run's token (issue 29)
    for target in ("MCTS", "NEURAL", "RETRIEVAL", "LLM"):
        assert f"ORCHESTRATOR_{target}_TARGET" in _fields("orchestrator")
    assert "ORCHESTRATOR_REST_PORT" in _fields("orchestrator")
    assert "RETRIEVAL_DATA_DIR" in _fields("retrieval")
    assert "LLM_FALLBACK_ORDER" in _fields("llm")
    assert "MCTS_NEURAL_TARGET" in _fields("mcts")
    assert "NEURAL_PORT" in _fields("neural")
