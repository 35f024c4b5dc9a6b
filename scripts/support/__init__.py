"""What tests, benchmarks and the load test share and production never runs: the audit of a
campaign's invariants and fixtures that write codes directly."""
