"""Events on the `coupon-events` topic: their models, and publishing without losing any (an
outbox for failed publishes, announcements made exactly once)."""
