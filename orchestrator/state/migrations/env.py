"""Alembic's environment for the job store: it migrates the connection it is handed
(:func:`orchestrator.state.database.upgrade_schema` opens it, in a transaction, under a lock)."""

from __future__ import annotations

from alembic import context

from orchestrator.state.tables import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
