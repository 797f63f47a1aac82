"""The consensus loop: its vocabulary (`types`), the routing interface it calls (`routing`), the
state machine (`consensus`), its progress events (`events`) and its spans (`tracing`)."""
