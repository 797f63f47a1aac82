"""Durable runs: the run store (model, schema, migrations, store) and the workers that execute
the runs it holds. Import from the modules: `runs.store.RunStore`, `runs.model.RunRecord`..."""

import logging

# Alembic (imported by runs.database) logs each of its plugins at INFO when it is imported, which
# happens before the service's JSON logging is set up: those lines came out as plain text. The
# store's own log lines say what a migration did.
logging.getLogger("alembic").setLevel(logging.WARNING)
