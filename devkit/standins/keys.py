"""The RSA key pair behind each stand-in that signs tokens Google would sign (App Check, Pub/Sub
push), and the JWKS the functions are pointed at to verify them."""

from __future__ import annotations

from abc import ABC, abstractmethod
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from devkit.serving import BackgroundServer


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


class KeySetServer(BackgroundServer, ABC):
    """A stand-in on 127.0.0.1 (a thread of this process) whose handler serves its key set's
    JWKS at /jwks.json, beside what else the stand-in answers."""

    keys: DevSigningKey

    def __init__(self, keys: DevSigningKey, *, port: int) -> None:
        self.keys = keys
        super().__init__(ThreadingHTTPServer(("127.0.0.1", port), self._handler()))

    @property
    def jwks_url(self) -> str:
        return f"{self.url}/jwks.json"

    @abstractmethod
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        """The request handler: /jwks.json and the stand-in's own paths."""
