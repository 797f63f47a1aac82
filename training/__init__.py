"""Every trainer of the project, outside the services that serve what they train: the HRM/TRM
reasoning trainer (`reasoning/`), the Connect Four policy/value self-play (`connect4_selfplay`,
`az/`), the Pons evaluation (`pons`) and the routers (`router/`).

Training imports serving code (the models, their token encodings, the mcts core, the checkpoint
format); serving never imports training (an import-linter `forbidden` contract in pyproject.toml).
"""
