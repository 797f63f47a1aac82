"""deploy/k8s, checked offline: schema (kubernetes-validate --strict), the kustomize build of the
base and of the GPU overlay (kubectl kustomize, where kubectl is installed), and the properties the
manifests promise: per service a Deployment, Service, HPA and PodDisruptionBudget; gRPC probes that
restart a wedged pod; requests and limits; Pod Security "restricted"; pinned images; the GPU
overlay; Qdrant as a StatefulSet; Secrets; NetworkPolicies that leave only the orchestrator open;
every address a manifest sets names a Service (and port) that exists.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import kubernetes_validate
import pytest
import yaml

from libs.server import LIVENESS
from libs.settings import ChannelSettings
from services.llm.settings import LlmSettings
from services.mcts.settings import MctsSettings
from services.neural.settings import NeuralSettings
from services.orchestrator.settings import OrchestratorSettings
from services.retrieval.settings import RetrievalSettings

K8S_VERSION = "1.31.0"
SERVICES = ("mcts", "neural", "retrieval", "llm", "orchestrator")
SETTINGS = {"mcts": MctsSettings, "neural": NeuralSettings, "retrieval": RetrievalSettings,
            "llm": LlmSettings, "orchestrator": OrchestratorSettings}
KUBECTL = shutil.which("kubectl")


def _files(repo_root):
    return sorted(p for p in (repo_root / "deploy" / "k8s").rglob("*.yaml")
                  if p.name != "kustomization.yaml" and "overlays" not in p.parts)


def _docs(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


def _render(repo_root, overlay: str) -> list[dict]:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed (.ci/run installs Debian's kubernetes-client)")
    built = subprocess.run([KUBECTL, "kustomize", str(repo_root / "deploy" / "k8s" / overlay)],
                           capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    return _docs(built.stdout)


def _base(repo_root) -> list[dict]:
    """The base's resources, from its files (what `kustomize build` renders, less the namespace)."""
    return [d for p in _files(repo_root) if "base" in p.parts for d in _docs(p.read_text())]


def _by_kind(docs, kind) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def _pod_specs(docs):
    for doc in docs:
        if doc["kind"] in ("Deployment", "StatefulSet"):
            yield doc["metadata"]["name"], doc["spec"]["template"]["spec"]


def test_every_file_passes_kubernetes_validate_strict(repo_root):
    files = _files(repo_root)
    assert len(files) >= 10
    for path in files:
        for doc in _docs(path.read_text()):
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


@pytest.mark.parametrize("overlay", ["base", "overlays/gpu", "overlays/small", "training"])
def test_kustomize_build_validates(repo_root, overlay):
    docs = _render(repo_root, overlay)
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "mcts-mesh", doc["metadata"]


def test_each_service_has_deployment_service_hpa_and_pdb(repo_root):
    docs = _base(repo_root)
    for kind in ("Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget"):
        assert set(SERVICES) <= set(_by_kind(docs, kind)), kind
    for name, hpa in _by_kind(docs, "HorizontalPodAutoscaler").items():
        assert hpa["spec"]["scaleTargetRef"]["name"] == name
        assert 2 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
    for name, pdb in _by_kind(docs, "PodDisruptionBudget").items():
        deployment = _by_kind(docs, "Deployment").get(name) or _by_kind(docs, "StatefulSet")[name]
        assert pdb["spec"]["selector"] == deployment["spec"]["selector"]


def test_services_have_grpc_probes_that_restart_a_wedged_pod(repo_root):
    deployments = _by_kind(_base(repo_root), "Deployment")
    for name in SERVICES:
        container = deployments[name]["spec"]["template"]["spec"]["containers"][0]
        port = container["ports"][0]["containerPort"]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert container[probe]["grpc"]["port"] == port, (name, probe)
        liveness = container["livenessProbe"]
        # Liveness asks the health service that stays SERVING while the process answers
        # (libs.server.LIVENESS); readiness the overall status.
        assert liveness["grpc"]["service"] == LIVENESS
        assert "service" not in container["readinessProbe"]["grpc"]
        # Nor does the startup probe restart a process whose dependency is away (retrieval
        # without Qdrant stays up, NOT_SERVING, until Qdrant answers).
        assert container["startupProbe"]["grpc"]["service"] == LIVENESS, name
        # A pod that stops answering its health check is restarted within about a minute.
        assert liveness["timeoutSeconds"] >= 1 and liveness["failureThreshold"] >= 1
        assert liveness["periodSeconds"] * liveness["failureThreshold"] <= 120


def test_pod_security_restricted_resources_and_pinned_images(repo_root):
    docs = _base(repo_root)
    namespace = next(d for d in docs if d["kind"] == "Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    specs = dict(_pod_specs(docs))
    assert {*SERVICES, "qdrant", "redis", "jaeger"} <= set(specs)
    for name, spec in specs.items():
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", name
        for container in spec["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, name
            assert context["readOnlyRootFilesystem"] is True, name
            assert context["capabilities"]["drop"] == ["ALL"], name
            assert context["seccompProfile"]["type"] == "RuntimeDefault", name
            assert set(container["resources"]["requests"]) >= {"cpu", "memory"}, name
            assert set(container["resources"]["limits"]) >= {"cpu", "memory"}, name
            image = container["image"]
            assert re.fullmatch(r"[\w./-]+:[\w.-]+", image) and not image.endswith(":latest"), image


def test_gpu_overlay_puts_neural_on_a_gpu_node(repo_root):
    docs = _render(repo_root, "overlays/gpu")
    neural = _by_kind(docs, "Deployment")["neural"]["spec"]["template"]["spec"]
    container = neural["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert neural["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert any(t["key"] == "nvidia.com/gpu" for t in neural["tolerations"])
    assert container["image"].endswith("-cuda")
    assert {"name": "NEURAL_DEVICE", "value": "cuda"} in container["env"]
    assert [e["name"] for e in container["env"]].count("NEURAL_DEVICE") == 1
    # The other services are unchanged by the overlay.
    assert "nvidia.com/gpu" not in str(_by_kind(docs, "Deployment")["mcts"])


def test_qdrant_statefulset_secrets_and_api_keys(repo_root):
    docs = _base(repo_root)
    qdrant = _by_kind(docs, "StatefulSet")["qdrant"]
    assert qdrant["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "storage"
    # No Secret in the manifests: `apply -k` would empty the values put in with kubectl. Every
    # Secret a pod reads is created by a command of deploy/k8s/README.md.
    assert not _by_kind(docs, "Secret")
    readme = (repo_root / "deploy" / "k8s" / "README.md").read_text()
    for name in _secrets_read(docs):
        assert f"create secret generic {name}" in readme, name
    deployments = _by_kind(docs, "Deployment")
    orchestrator = deployments["orchestrator"]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in orchestrator["env"]}
    assert env["ORCHESTRATOR_REQUIRE_API_KEY"] == "true"
    llm = deployments["llm"]["spec"]["template"]["spec"]["containers"][0]
    # Optional: without the Secret every remote provider is off and the offline provider answers.
    assert {"secretRef": {"name": "llm-provider-keys", "optional": True}} in llm["envFrom"]


def test_only_the_orchestrator_is_reachable_from_outside_the_namespace(repo_root):
    policies = _by_kind(_base(repo_root), "NetworkPolicy")
    deny = policies["default-deny-ingress"]["spec"]
    assert deny["podSelector"] == {} and deny["policyTypes"] == ["Ingress"]
    assert "ingress" not in deny
    open_to_all = set()
    for policy in policies.values():
        for rule in policy["spec"].get("ingress", []):
            sources = rule.get("from")
            if not sources or any("ipBlock" in s or "namespaceSelector" in s for s in sources):
                open_to_all.add(policy["spec"]["podSelector"]["matchLabels"]["app"])
    assert open_to_all == {"orchestrator"}
    protected = {p["spec"]["podSelector"].get("matchLabels", {}).get("app")
                 for p in policies.values()}
    assert {*SERVICES, "qdrant", "redis", "jaeger"} <= protected


ADDRESS = re.compile(r"^(?:[a-z]+://)?([a-z][a-z0-9-]*):(\d+)(?:/.*)?$")


def test_every_address_names_an_existing_service_and_port(repo_root):
    docs = _base(repo_root)
    services = {name: {p["port"] for p in s["spec"]["ports"]}
                for name, s in _by_kind(docs, "Service").items()}
    checked = 0
    for name, spec in _pod_specs(docs):
        for container in spec["containers"]:
            for variable in container.get("env", []):
                match = ADDRESS.match(str(variable.get("value", "")))
                if match:
                    host, port = match.group(1), int(match.group(2))
                    assert host in services, f"{name}: {variable['name']} -> no Service {host}"
                    assert port in services[host], \
                        f"{name}: {variable['name']} -> {host} has no port {port}"
                    checked += 1
    # mcts -> neural, retrieval -> qdrant, orchestrator -> 4 backends, 5 x jaeger (the Redis URL
    # carries its password: it comes from a Secret, test_mesh_token_and_store_passwords_...)
    assert checked >= 11


def _secrets_read(docs) -> set[str]:
    """Names of the Secrets the pod specs of `docs` read (env, envFrom, volumes)."""
    names = set()
    for _, spec in _pod_specs(docs):
        for container in spec["containers"]:
            names |= {secret for secret, _ in _secret_refs(container).values()}
            names |= {e["secretRef"]["name"] for e in container.get("envFrom", [])
                      if "secretRef" in e}
        names |= {v["secret"]["secretName"] for v in spec.get("volumes", []) if "secret" in v}
    return names


def _secret_refs(container: dict) -> dict[str, tuple[str, str]]:
    """Each variable of `container` that comes from a Secret: name -> (secret, key)."""
    refs = (e for e in container.get("env", []) if "secretKeyRef" in e.get("valueFrom", {}))
    return {e["name"]: (e["valueFrom"]["secretKeyRef"]["name"],
                        e["valueFrom"]["secretKeyRef"]["key"]) for e in refs}


def test_mesh_token_and_store_passwords_come_from_secrets(repo_root):
    """Issue 29: every mesh service reads the mesh token (its backends refuse calls without it)
    from the Secret mesh-token; Redis and Qdrant require the passwords of redis-auth and
    qdrant-auth, which the orchestrator and retrieval read from the same Secrets; the REST port
    does not serve /metrics (the metrics port does)."""
    docs = _base(repo_root)
    assert _secrets_read(docs) >= {"mesh-token", "redis-auth", "qdrant-auth"}
    pods = dict(_pod_specs(docs))
    for name, settings_class in SETTINGS.items():
        container = next(c for c in pods[name]["containers"] if c["name"] == name)
        prefix = settings_class.model_config["env_prefix"]
        assert _secret_refs(container).get(f"{prefix}MESH_TOKEN") == ("mesh-token", "token"), name
    redis = pods["redis"]["containers"][0]
    assert _secret_refs(redis)["REDIS_PASSWORD"] == ("redis-auth", "password")
    assert redis["command"][-1].endswith('--requirepass "$REDIS_PASSWORD"')  # the shell expands it
    assert _secret_refs(redis)["REDISCLI_AUTH"] == ("redis-auth", "password")  # the probe's
    qdrant = pods["qdrant"]["containers"][0]
    assert _secret_refs(qdrant)["QDRANT__SERVICE__API_KEY"] == ("qdrant-auth", "api-key")
    retrieval = next(c for c in pods["retrieval"]["containers"] if c["name"] == "retrieval")
    assert _secret_refs(retrieval)["RETRIEVAL_QDRANT_API_KEY"] == ("qdrant-auth", "api-key")
    orchestrator = pods["orchestrator"]["containers"][0]
    assert _secret_refs(orchestrator)["ORCHESTRATOR_REDIS_URL"] == ("redis-auth", "url")
    env = {e["name"]: e.get("value") for e in orchestrator["env"]}
    assert env["ORCHESTRATOR_REST_METRICS"] == "false"
    assert "redis://" not in str(pods), "no store address with a password in a manifest"


def test_compose_publishes_on_loopback_and_gives_every_service_the_runs_token(repo_root):
    """Issue 29: the API (keys off in compose) and Jaeger's UI are published on 127.0.0.1 unless
    MESH_BIND says otherwise; a one-shot service writes the run's mesh token, which every
    service reads from the shared volume."""
    services = yaml.safe_load((repo_root / "deploy" / "compose.yaml").read_text())["services"]
    published = [port for spec in services.values() for port in spec.get("ports", [])]
    assert len(published) == 4
    # The orchestrator's metrics port: on loopback whatever MESH_BIND says.
    assert "127.0.0.1:${MESH_METRICS_PORT:-9464}:9464" in services["orchestrator"]["ports"]
    for port in published:
        assert str(port).startswith(("${MESH_BIND:-127.0.0.1}:", "127.0.0.1:")), port
    assert "secrets.token_urlsafe" in " ".join(services["mesh-token"]["entrypoint"])
    # The front binds 0.0.0.0 in its container, so compose names the Hosts it answers: loopback.
    allowed = services["orchestrator"]["environment"]["ORCHESTRATOR_REST_ALLOWED_HOSTS"]
    assert set(json.loads(allowed)) == {"localhost", "127.0.0.1", "[::1]"}
    for name, settings_class in SETTINGS.items():
        spec = services[name]
        prefix = settings_class.model_config["env_prefix"]
        token_file = spec["environment"][f"{prefix}MESH_TOKEN_FILE"]
        assert any(volume == f"mesh-token:{token_file.rsplit('/', 1)[0]}:ro"
                   for volume in spec["volumes"]), name
        assert spec["depends_on"]["mesh-token"] == {"condition": "service_completed_successfully"}


def _read_settings(monkeypatch, settings_class, variables: dict[str, str]):
    """`settings_class` read from an environment of `variables` alone (for its prefix), after
    checking that each variable of its prefix names one of its fields: the settings ignore unknown
    variables, so a misspelt one would be dropped without a word."""
    prefix = settings_class.model_config["env_prefix"]
    ours = {key: value for key, value in variables.items() if key.startswith(prefix)}
    unknown = [key for key in ours if key[len(prefix):].lower() not in settings_class.model_fields]
    assert not unknown, f"{settings_class.__name__} has no field for {unknown}"
    for key in list(os.environ):
        if key.startswith(prefix):
            monkeypatch.delenv(key)
    for key, value in ours.items():
        monkeypatch.setenv(key, value)
    return settings_class(), ours


def test_every_service_variable_is_a_setting_and_each_caller_sets_its_keepalive(repo_root,
                                                                                monkeypatch):
    """Each variable a base manifest sets under a service's prefix is a field of its settings
    and its value validates; the services that call others (`ChannelSettings`: the orchestrator,
    mcts) spell out their channels' HTTP/2 keepalive, and the settings read it."""
    pods = dict(_pod_specs(_base(repo_root)))
    callers = 0
    for name, settings_class in SETTINGS.items():
        container = next(c for c in pods[name]["containers"] if c["name"] == name)
        variables = {e["name"]: str(e["value"]) for e in container["env"] if "value" in e}
        settings, ours = _read_settings(monkeypatch, settings_class, variables)
        if issubclass(settings_class, ChannelSettings):
            prefix = settings_class.model_config["env_prefix"]
            time_s = ours.get(f"{prefix}KEEPALIVE_TIME_S")
            timeout_s = ours.get(f"{prefix}KEEPALIVE_TIMEOUT_S")
            assert time_s is not None and timeout_s is not None, f"{name}: no keepalive variables"
            assert (settings.keepalive_time_s, settings.keepalive_timeout_s) == (
                float(time_s), float(timeout_s))
            callers += 1
    assert callers == 2


def test_every_compose_variable_is_a_setting(repo_root, monkeypatch):
    compose = yaml.safe_load((repo_root / "deploy" / "compose.yaml").read_text())
    for name, settings_class in SETTINGS.items():
        environment = compose["services"][name]["environment"]
        _read_settings(monkeypatch, settings_class,
                       {key: str(value) for key, value in environment.items()})


def test_compose_sets_the_neural_target_and_an_address_for_each_backend(repo_root):
    compose = yaml.safe_load((repo_root / "deploy" / "compose.yaml").read_text())
    services = compose["services"]
    assert services["mcts"]["environment"]["MCTS_NEURAL_TARGET"] == "neural:50053"
    for name, spec in services.items():
        for key, value in (spec.get("environment") or {}).items():
            match = ADDRESS.match(str(value))
            # localhost: a link for the user's browser on the host (Jaeger's published UI).
            if match and not key.endswith("_PORT") and match.group(1) != "localhost":
                assert match.group(1) in services, f"{name}: {key} -> no compose service"


def test_training_actors_and_learner_share_the_run_volume(repo_root):
    """deploy/k8s/training (issue 12): the self-play actors' Deployment and the learner Job mount
    one ReadWriteMany claim; the learner waits for external actors; both are restricted pods."""
    docs = _render(repo_root, "training")
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        assert doc["metadata"]["namespace"] == "mcts-mesh"
    claim = _by_kind(docs, "PersistentVolumeClaim")["connect4-az-run"]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    learner = _by_kind(docs, "Job")["connect4-az-learner"]["spec"]["template"]["spec"]
    actors = _by_kind(docs, "Deployment")["selfplay-actor"]["spec"]["template"]["spec"]
    learner_args = learner["containers"][0]["args"]
    assert learner_args[:2] == ["train", "connect4-az"] and "external_actors=true" in learner_args
    assert actors["containers"][0]["args"][0] == "selfplay-actor"
    # No $(VAR) in any command: `podman kube play` does not expand them (the actor's id is its
    # host name, the pod's name, by default).
    for spec in (learner, actors):
        for container in spec["containers"]:
            assert not [arg for arg in container.get("command", []) + container["args"]
                        if "$(" in arg], container["name"]
    for spec in (learner, actors):
        assert spec["securityContext"]["runAsNonRoot"] is True
        container = spec["containers"][0]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert set(container["resources"]["limits"]) >= {"cpu", "memory"}
        run_dir = container["args"][container["args"].index("--run-dir") + 1]
        mount = next(m for m in container["volumeMounts"] if run_dir.startswith(m["mountPath"]))
        volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
        assert volume["persistentVolumeClaim"]["claimName"] == "connect4-az-run"


def test_each_service_has_its_own_metrics_port(repo_root):
    """`podman kube play` publishes every containerPort on one host: the five services' metrics
    ports differ, and each is the same in the container, its settings, its headless Service, its
    NetworkPolicy and Prometheus's scrape config."""
    docs = _base(repo_root)
    pods = dict(_pod_specs(docs))
    services = _by_kind(docs, "Service")
    policies = _by_kind(docs, "NetworkPolicy")
    prometheus = yaml.safe_load(
        (repo_root / "deploy/k8s/base/prometheus/prometheus.yml").read_text())
    scraped = {sd["names"][0].split("-metrics.")[0]: sd["port"]
               for job in prometheus["scrape_configs"] for sd in job.get("dns_sd_configs", [])}
    ports = {}
    for name, settings_class in SETTINGS.items():
        container = next(c for c in pods[name]["containers"] if c["name"] == name)
        port = next(p["containerPort"] for p in container["ports"] if p["name"] == "metrics")
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env[f"{settings_class.model_config['env_prefix']}METRICS_PORT"] == str(port), name
        assert services[f"{name}-metrics"]["spec"]["ports"][0]["port"] == port, name
        allowed = {p["port"] for policy in policies.values()
                   if policy["spec"]["podSelector"].get("matchLabels") == {"app": name}
                   for rule in policy["spec"].get("ingress", []) for p in rule.get("ports", [])}
        assert port in allowed, name
        assert scraped[name] == port, name
        ports[name] = port
    assert len(set(ports.values())) == len(ports), ports
