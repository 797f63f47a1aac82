"""Agents of the consensus loop: the exact checker (in-process), and clients of the mcts, neural,
retrieval and llm services. Each implements `services.orchestrator.loop.types.Agent`."""
