"""`python -m mcts_mesh.cli ...`: the same as the `mcts-mesh` command."""

import sys

from mcts_mesh.cli import main

sys.exit(main())
