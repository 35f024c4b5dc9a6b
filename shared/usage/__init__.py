"""Usage: sharded counters (counters), what count_usage counts (verification, counting: with the
low-stock and sold-out announcements), what is read back (reading: stock, stats, reports), and
reconciliation with the documents."""
