"""What the test tiers share: names of the test stack, ID tokens, CloudEvent envelopes, and
clients for the functions. Fixtures live in tests/conftest.py and use these."""
