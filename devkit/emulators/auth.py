"""The Firebase Auth emulator's REST API (Identity Toolkit): users signed up and in as a landing
page or an operator's console would, and custom claims set as firebase-admin would (the emulator
grants the `owner` bearer what a service account may do). For the local stack's demo,
./scripts/token and the tests."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from devkit import http

# The emulator takes any API key; a web app's config carries this one locally.
API_KEY = "demo-api-key"


class AuthEmulatorError(RuntimeError):
    """The emulator refused a call; `reason` is its message (e.g. EMAIL_NOT_FOUND)."""

    def __init__(self, reason: str, status: int) -> None:
        super().__init__(f"Auth emulator answered {status}: {reason}")
        self.reason = reason
        self.status = status


@dataclass(frozen=True, slots=True)
class SignedIn:
    uid: str
    id_token: str
    refresh_token: str


class AuthEmulatorClient:
    def __init__(self, host_port: str, *, project: str) -> None:
        self.base = f"http://{host_port}"
        self.project = project

    def _call(self, path: str, body: dict[str, Any], *, owner: bool = False) -> dict[str, Any]:
        headers = {"Authorization": "Bearer owner"} if owner else {}
        response = http.request(
            "POST",
            f"{self.base}/identitytoolkit.googleapis.com/v1/{path}",
            params={"key": API_KEY},
            json=body,
            headers=headers,
            timeout=30,
        )
        try:
            answer = response.json()
        except ValueError:
            answer = {}
        if not response.ok or not isinstance(answer, dict):
            reason = answer.get("error", {}).get("message") if isinstance(answer, dict) else None
            raise AuthEmulatorError(str(reason or response.text[:200]), response.status_code)
        return answer

    @staticmethod
    def _signed_in(answer: dict[str, Any]) -> SignedIn:
        return SignedIn(answer["localId"], answer["idToken"], answer["refreshToken"])

    def sign_up_anonymous(self) -> SignedIn:
        """A new anonymous shopper, as `signInAnonymously()` makes one."""
        return self._signed_in(self._call("accounts:signUp", {"returnSecureToken": True}))

    def sign_up(self, email: str, password: str) -> SignedIn:
        body = {"email": email, "password": password, "returnSecureToken": True}
        return self._signed_in(self._call("accounts:signUp", body))

    def sign_in(self, email: str, password: str) -> SignedIn:
        body = {"email": email, "password": password, "returnSecureToken": True}
        return self._signed_in(self._call("accounts:signInWithPassword", body))

    def update(self, uid: str, *, claims: dict[str, Any] | None, email_verified: bool) -> None:
        """Set custom claims (they reach ID tokens issued afterwards) and the verified flag."""
        body: dict[str, Any] = {"localId": uid, "emailVerified": email_verified}
        if claims is not None:
            body["customAttributes"] = json.dumps(claims)
        self._call(f"projects/{self.project}/accounts:update", body, owner=True)

    def ensure_user(
        self, email: str, password: str, *, claims: dict[str, Any] | None = None
    ) -> SignedIn:
        """Sign in as this email/password user, creating it (verified, with `claims`) first if
        it does not exist; the token returned carries the claims."""
        try:
            signed_in = self.sign_in(email, password)
        except AuthEmulatorError as exc:
            if exc.reason != "EMAIL_NOT_FOUND":
                raise
            signed_in = self.sign_up(email, password)
        self.update(signed_in.uid, claims=claims, email_verified=True)
        return self.sign_in(email, password)

    def disable(self, uid: str) -> None:
        """Disable an account, as an owner does in the Firebase console."""
        self._call(
            f"projects/{self.project}/accounts:update",
            {"localId": uid, "disableUser": True},
            owner=True,
        )

    def revoke_tokens(self, uid: str, *, valid_since: int) -> None:
        """Revoke the tokens issued before `valid_since` (unix seconds), as firebase-admin's
        revoke_refresh_tokens does with the current second."""
        body = {"localId": uid, "validSince": str(valid_since)}
        self._call(f"projects/{self.project}/accounts:update", body, owner=True)

    def delete_user(self, uid: str) -> None:
        """Delete an account (its phone number or email is then free for a new one)."""
        self._call(f"projects/{self.project}/accounts:delete", {"localId": uid}, owner=True)

    def verification_code(self, phone_number: str) -> str | None:
        """The SMS code the emulator last made for `phone_number` and that is not used yet (it
        sends no SMS; a person reads the code in its log)."""
        response = http.request(
            "GET",
            f"{self.base}/emulator/v1/projects/{self.project}/verificationCodes",
            timeout=30,
        )
        if not response.ok:
            raise AuthEmulatorError(response.text[:200], response.status_code)
        codes = [
            entry["code"]
            for entry in response.json().get("verificationCodes", [])
            if entry.get("phoneNumber") == phone_number
        ]
        return codes[-1] if codes else None

    def users(self) -> list[dict[str, Any]]:
        answer = self._call(f"projects/{self.project}/accounts:query", {}, owner=True)
        found: list[dict[str, Any]] = answer.get("userInfo", [])
        return found
