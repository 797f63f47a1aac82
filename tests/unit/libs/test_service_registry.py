"""The registry of the services (libs/services.py) says what each service's package says: its
entry point's NAME is the registry's word, its proto service is the one the registry names, its
settings read the environment under the registry's prefix; ports do not collide."""

from __future__ import annotations

import ast
import importlib

import pytest
from google.protobuf import descriptor_pool

from libs.services import BACKENDS, BY_NAME, NAMES, ORCHESTRATOR, SERVICES
from mcts_mesh.cli.serve import SERVICE_ENTRY, load


@pytest.mark.parametrize("service", SERVICES, ids=lambda service: service.name)
def test_each_entry_names_its_service_as_its_package_does(service, repo_root):
    main = repo_root / "services" / service.name / "main.py"
    tree = ast.parse(main.read_text())
    names = {node.targets[0].id: node.value for node in tree.body
             if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)}
    assert ast.literal_eval(names["NAME"]) == service.name
    assert service.entry_module == f"services.{service.name}.main"
    assert callable(load(service.entry_module + ":main"))


@pytest.mark.parametrize("service", SERVICES, ids=lambda service: service.name)
def test_each_proto_service_and_settings_prefix_is_the_services_own(service):
    importlib.import_module(f"mesh.{service.name}.v1.{service.name}_service_pb2")
    found = descriptor_pool.Default().FindServiceByName(service.grpc_service)
    assert found.full_name == service.grpc_service
    settings_class = load(service.settings_class)
    assert settings_class.model_config["env_prefix"] == service.env_prefix


def test_ports_start_order_and_the_cli_table():
    assert sorted(s.port_offset for s in SERVICES) == list(range(len(SERVICES)))
    assert BY_NAME[ORCHESTRATOR].port_offset == 0
    assert NAMES[-1] == ORCHESTRATOR and ORCHESTRATOR not in {s.name for s in BACKENDS}
    assert BY_NAME["llm"].env_prefix == "LLM_"
    assert set(SERVICE_ENTRY) == set(NAMES)
