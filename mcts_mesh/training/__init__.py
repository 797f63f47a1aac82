"""Offline tools that compose services' cores (outside every service, so no service imports
another's package): the Connect Four self-play trainer drives the mcts search core to produce the
neural service's training data."""
