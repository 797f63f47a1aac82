"""Durable runs: the run store (model, schema, migrations, store) and the workers that execute
the runs it holds. Import from the modules: `runs.store.RunStore`, `runs.model.RunRecord`..."""
