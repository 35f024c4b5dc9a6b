"""The claim engine: a per-instance candidate pool over shuffled `random_float` ranges, one
guarded atomic commit per claim, sold out proven before it is said, the claim service that puts
the policy and the waiting room around it, and the claims' events."""
