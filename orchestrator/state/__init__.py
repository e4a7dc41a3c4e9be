"""Job state: status enum and transitions, the SQLite store, events."""
