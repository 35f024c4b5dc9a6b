"""The coupon pool: coupon documents (id derived from the code, `random_float` for the claim
ranges) and the query that finds unassigned ones. Written by intake, taken by claims."""
