"""The RSA key pair behind each stand-in that signs tokens Google would sign (App Check, Pub/Sub
push), and the JWKS the functions are pointed at to verify them."""

from __future__ import annotations

from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm


class DevSigningKey:
    """An RSA key pair that signs RS256 tokens, and its public JWKS."""

    def __init__(self, key_id: str) -> None:
        self.key_id = key_id
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def jwks(self) -> dict[str, Any]:
        public: dict[str, Any] = RSAAlgorithm.to_jwk(self._key.public_key(), as_dict=True)
        return {"keys": [{**public, "kid": self.key_id, "alg": "RS256", "use": "sig"}]}

    def sign(self, claims: dict[str, Any], **headers: str) -> str:
        return jwt.encode(
            claims, self._key, algorithm="RS256", headers={"kid": self.key_id, **headers}
        )
