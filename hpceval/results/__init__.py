"""Results: one schema for every harness, atomic writes, and tables across runs."""
