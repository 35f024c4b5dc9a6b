"""Benchmarks that print figures, each run as `python -m scripts.bench.<name>`: claims (the claim
engine against the reference design), counters (count_usage's sharded counters), imports (the CSV
import path against plain batch writes) and waiting_room (a simulation of the admission queue).
They share `harness` (command line, emulators, timing, table, JSON)."""
