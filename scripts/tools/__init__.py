"""Operator commands, each behind a thin command in scripts/: upload_codes (a CSV into a
campaign, its import job followed) and reconcile (usage counters recounted and repaired)."""
