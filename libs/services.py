"""The registry of the mesh's services: each one named once, with its port and entry point.

A service's one word (`MeshService.name`) names everything about it: its package
(`services/<name>`), `mcts-mesh serve <name>`, the compose service and the Kubernetes Deployment,
the `mesh_service` label of its metrics and its trace service name, the orchestrator's channel to
it and its line in the orchestrator's dependency report. Its environment variables are the word in
capitals and an underscore, then the setting (`LLM_PORT`, `ORCHESTRATOR_REST_PORT`).

The launcher (ports, environments, start order), the CLI (`serve`: the settings class and entry
module to run) and the orchestrator (its dependencies) read this table; a test checks it against
each service's package. Modules are named as strings, resolved by whoever starts a service: libs
imports no service.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MeshService:
    """One service of the mesh.

    Attributes:
        name: the service's one word (see the module doc).
        port_offset: its gRPC port is the mesh's port base plus this (orchestrator 50051, mcts
            50052, neural 50053, retrieval 50054, llm 50055); its metrics port 10 higher.
        grpc_service: the full name of its proto service (`mesh.llm.v1.LlmService`), the name its
            health service reports it under.
        settings_class: `module:Class` of its pydantic settings object.
    """

    name: str
    port_offset: int
    grpc_service: str
    settings_class: str

    @property
    def env_prefix(self) -> str:
        """The prefix of its environment variables: "LLM_" for llm."""
        return f"{self.name.upper()}_"

    @property
    def entry_module(self) -> str:
        """The module whose `main(settings, on_listening)` runs it: `services.<name>.main`."""
        return f"services.{self.name}.main"


ORCHESTRATOR = "orchestrator"

SERVICES: tuple[MeshService, ...] = (
    MeshService("mcts", 1, "mesh.mcts.v1.MctsService", "services.mcts.settings:MctsSettings"),
    MeshService("neural", 2, "mesh.neural.v1.NeuralService",
                "services.neural.settings:NeuralSettings"),
    MeshService("retrieval", 3, "mesh.retrieval.v1.RetrievalService",
                "services.retrieval.settings:RetrievalSettings"),
    MeshService("llm", 4, "mesh.llm.v1.LlmService", "services.llm.settings:LlmSettings"),
    MeshService(ORCHESTRATOR, 0, "mesh.orchestrator.v1.OrchestratorService",
                "services.orchestrator.settings:OrchestratorSettings"),
)
"""Every service, in start order: the four backends, then the orchestrator, which needs their
addresses."""

BACKENDS: tuple[MeshService, ...] = tuple(s for s in SERVICES if s.name != ORCHESTRATOR)
"""The services the orchestrator depends on (and calls over a channel of the same name)."""

BY_NAME: dict[str, MeshService] = {service.name: service for service in SERVICES}
"""Each service by its word."""

NAMES: tuple[str, ...] = tuple(service.name for service in SERVICES)
"""The words, in start order."""
