"""Puzzle data shared by the neural trainer, the orchestrator's checker and solver agents and the
CLI: N x N Sudoku (`sudoku`), mazes (`maze`), ARC-AGI tasks (`arc`) and the file readers
(`readers`). numpy only: no torch, no grpc.
"""
