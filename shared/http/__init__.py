"""The HTTP edge (the only place Flask lives): routing with per-route access, CORS, Firebase
ID-token authentication, and the two APIs, claim_api and admin_api."""
