"""The batched engine: PUCT or Gumbel MuZero with the leaves evaluated in batches by the caller
(a network, a game, a remote process), driven by ask/tell or a compiled loop
(docs/services/mcts.md). Imports no grpc."""
