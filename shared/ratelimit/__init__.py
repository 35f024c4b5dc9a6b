"""Limits on guessing: code look-ups and redemptions per caller and per client address, across
every instance, without a write per request (see service.py and docs/codes.md)."""
