"""The job store's Alembic migrations (run by :func:`orchestrator.state.database.upgrade_schema`)."""
