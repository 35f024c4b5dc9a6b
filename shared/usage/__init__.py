"""Usage: sharded counters fed by events (count_usage), stats, reports, low-stock and sold-out
announcements, and reconciliation with the documents."""
