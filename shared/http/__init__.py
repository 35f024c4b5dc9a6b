"""The HTTP edge (the only place Flask lives): routes with their access declared, CORS, Firebase
ID tokens, and the functions' APIs: claim_api, admin_api (admin/) and the scheduled sweep."""
