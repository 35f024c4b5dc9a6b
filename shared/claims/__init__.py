"""The claim engine: a per-instance candidate pool over shuffled `random_float` ranges, one
guarded atomic commit per claim, sold out proven before it is said, and the claim service that
puts the waiting room and the event around it."""
