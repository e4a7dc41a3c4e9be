"""One Alembic revision per schema change; each is a fixed snapshot, never edited once released."""
