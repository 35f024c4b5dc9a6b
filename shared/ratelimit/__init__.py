"""Rate limits, in one vocabulary: `rate` is per second, `burst` the most a bucket lets through
at once; `try_acquire` takes if it can (never waits), `wait` says how long until it could, and
`acquire` blocks until it may go.

- buckets.py: token buckets, one or one per key as an instance's share of a limit over all
  instances (the waiting room's admissions, code look-ups).
- pacing.py: pacers, evenly spaced starts with no burst (a job's writes under Firestore's
  ramp, a webhook endpoint's requests), and the `WriteLimiter` they serve.
- service.py: the guessing limit, per caller and per client address over every instance
  (docs/codes.md).
"""
