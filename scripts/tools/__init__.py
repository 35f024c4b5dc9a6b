"""Operator commands, each behind a thin command in scripts/: upload_codes (a CSV into a
campaign, its import job followed), assign_codes (a recipient list, its assignment job followed,
the result downloaded) and reconcile (usage counters recounted and repaired)."""
