"""The rollout engine: UCT or PUCT with rollouts at the leaves, progressive widening, RAVE, root
and lock-free tree parallelisation and a transposition table (docs/services/mcts.md). Imports
no grpc."""
