"""Entry point of the LLM gateway: `mcts-mesh serve llm` calls `main()`."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from mesh.llm.v1 import llm_service_pb2, llm_service_pb2_grpc

from libs.server import Servicer, run_service, serve
from services.llm.gateway import Gateway, build_gateway
from services.llm.redaction import install_log_redaction
from services.llm.servicer import LlmServicer
from services.llm.settings import LlmSettings

NAME = "llm"
SERVICE_NAME = llm_service_pb2.DESCRIPTOR.services_by_name["LlmService"].full_name

log = logging.getLogger(__name__)


async def build_servicers(
    settings: LlmSettings, gateway: Gateway | None = None
) -> tuple[list[Servicer], Callable[[], Awaitable[None]]]:
    """The gateway's servicer and its readiness hook. Its probe is `gateway.readiness` (NOT_SERVING
    while no provider is configured or every circuit is open).

    Args:
        settings: the gateway's settings; used to build the gateway when none is given.
        gateway: a prebuilt gateway (tests pass one with their own providers).
    """
    gateway = gateway or build_gateway(settings)
    servicer = LlmServicer(gateway, settings.prices)

    async def ready() -> None:
        # Providers are remote or in-process; nothing to load. Say what will answer.
        log.info("LLM fallback order: %s", ", ".join(gateway.order))
        await gateway.publish_circuit_states()

    return [Servicer(llm_service_pb2_grpc.add_LlmServiceServicer_to_server, servicer,
                     SERVICE_NAME)], ready


def main(settings: LlmSettings | None = None,
         on_listening: Callable[[dict[str, int]], None] | None = None) -> None:
    """Reads `LLM_*` settings (unless given), logs them with secrets masked, and serves until
    SIGTERM; every log line is redacted of the providers' keys and URL credentials
    (`redaction.install_log_redaction`)."""
    settings = settings or LlmSettings()

    async def run() -> None:
        install_log_redaction(settings)  # before any provider is called
        gateway = build_gateway(settings)
        servicers, ready = await build_servicers(settings, gateway)
        try:
            await serve(NAME, settings, servicers, ready, on_listening=on_listening,
                        probe=gateway.readiness)
        finally:
            await gateway.aclose()

    run_service(NAME, settings, run)


if __name__ == "__main__":
    main()
