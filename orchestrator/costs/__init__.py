"""Cost ledger and reports."""
