"""`serve()` moves what start-up made out of the garbage collector's reach (`gc.freeze`), so a
full collection walks only what requests made, not the ~10^5 objects of modules and models."""

from __future__ import annotations

import asyncio
import gc
import signal

from libs.server import serve
from libs.settings import ServiceSettings


async def test_serve_freezes_the_start_up_objects_before_it_reports_listening():
    gc.unfreeze()
    seen: dict[str, int] = {}

    def listening(ports: dict[str, int]) -> None:
        seen["frozen"] = gc.get_freeze_count()
        # Once serve() has installed its SIGTERM handler (right after this callback): stop.
        asyncio.get_running_loop().call_soon(signal.raise_signal, signal.SIGTERM)

    try:
        await serve("frozen", ServiceSettings(port=0, metrics_port=-1, drain_grace_s=0), [],
                    on_listening=listening)
    finally:
        gc.unfreeze()
    assert seen["frozen"] > 1000
