"""Benchmarks that print figures, each run as `python -m scripts.bench.<name>`: claims (the claim
engine against the reference design), counters (count_usage's sharded counters), imports (the CSV
import path against plain batch writes), waiting_room (a simulation of the admission queue) and
webhooks (events delivered per second to one endpoint and to ten).
bot_farm (what each bot-defense setting of a campaign leaves a farm of accounts).
They share `harness` (command line, emulators, timing, table, JSON)."""
