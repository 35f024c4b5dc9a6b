"""Codes for email campaigns: a recipient list dropped in the bucket, each recipient given a code
of their own with the same guarantees as a claim."""
