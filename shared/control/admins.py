"""Who may use the console: owners invite and remove admins.

Roles are Firebase Auth custom claims (`admin: true`, and `owner: true` beside it for owners),
which admin_api checks on every ID token; `admins/{uid}` records who holds one, who gave it and
when, so the list never walks every user of the project (shoppers included). The record and its
audit entry are one commit, made after the claims are set: a failure in between leaves a user
with claims and no record, and inviting them again records it. A removed admin's refresh tokens
are revoked, and admin routes check revocation: the ID token they hold stops working within the
revocation check's cache (CODEDROP_REVOCATION_CACHE_SECONDS).

The first owner has nobody to invite them: `./scripts/grant_owner` (scripts/tools/grant_owner.py)
does it with the deployer's credentials.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated

from google.cloud import firestore
from pydantic import BaseModel, StringConstraints

from shared.audit import store as audit_store
from shared.audit.models import Actor, AuditAction, AuditContext, AuditEntry
from shared.errors import AdminNotFound, CannotRemoveYourself
from shared.gcp import firebase
from shared.gcp.firestore import admins_collection
from shared.types import RequestBody, UtcTime

ROLE_CLAIMS = ("admin", "owner")

Email = Annotated[
    str,
    StringConstraints(
        strip_whitespace=True,
        to_lower=True,
        max_length=254,
        pattern=r"^[^@\s]{1,64}@[^@\s]+\.[^@\s]+$",
    ),
]


class AdminRole(StrEnum):
    ADMIN = "admin"
    OWNER = "owner"


class AdminInvite(RequestBody):
    email: Email
    role: AdminRole = AdminRole.ADMIN


class AdminView(BaseModel):
    uid: str
    email: str | None
    role: AdminRole
    invited_by: str | None
    invited_at: UtcTime


class AdminList(BaseModel):
    admins: list[AdminView]


def role_claims(claims: dict[str, object], role: AdminRole | None) -> dict[str, object]:
    """The user's claims with the console's roles replaced (others, e.g. redeemer, kept)."""
    kept = {k: v for k, v in claims.items() if k not in ROLE_CLAIMS}
    if role is None:
        return kept
    return kept | {"admin": True} | ({"owner": True} if role is AdminRole.OWNER else {})


class AdminService:
    def __init__(self, *, db: firestore.Client, project_id: str) -> None:
        self._db = db
        self._project = project_id

    def list_admins(self) -> AdminList:
        snapshots = admins_collection(self._db).order_by("invited_at").limit(1000).stream()
        return AdminList(admins=[AdminView(uid=s.id, **(s.to_dict() or {})) for s in snapshots])

    def invite(self, *, email: str, role: AdminRole, audit: AuditContext) -> AdminView:
        """Give the user with this email (created if new) the role, and record it."""
        user = firebase.user_by_email(email, project_id=self._project, create=True)
        assert user is not None  # created when missing
        firebase.set_claims(user.uid, role_claims(user.claims, role), project_id=self._project)
        view = AdminView(
            uid=user.uid,
            email=user.email,
            role=role,
            invited_by=audit.actor.email or audit.actor.uid,
            invited_at=audit.at,
        )
        before = {k: user.claims[k] for k in ROLE_CLAIMS if k in user.claims}
        self._commit(
            view,
            audit.entry(
                AuditAction.ADMIN_INVITE,
                campaign_id=None,
                target=user.uid,
                before=before or None,
                after={"email": user.email, "role": role.value},
            ),
        )
        return view

    def sign_out(self, *, uid: str) -> None:
        """The console's sign-out: the admin's sessions end everywhere, not only in this browser
        (its refresh tokens are revoked; the ID token it held is refused within the revocation
        check's bound)."""
        firebase.revoke_sessions(uid, project_id=self._project)

    def remove(self, *, uid: str, audit: AuditContext) -> None:
        if uid == audit.actor.uid:
            raise CannotRemoveYourself()
        user = firebase.user_by_uid(uid, project_id=self._project)
        ref = admins_collection(self._db).document(uid)
        has_role = user is not None and any(user.claims.get(k) for k in ROLE_CLAIMS)
        if not has_role and not ref.get().exists:
            raise AdminNotFound(f"{uid!r} is not an admin.")
        if user is not None:
            firebase.set_claims(uid, role_claims(user.claims, None), project_id=self._project)
            firebase.revoke_sessions(uid, project_id=self._project)
        batch = self._db.batch()
        batch.delete(ref)
        entry = audit.entry(
            AuditAction.ADMIN_REMOVE,
            campaign_id=None,
            target=uid,
            before={
                "email": user.email if user else None,
                **{k: user.claims[k] for k in ROLE_CLAIMS if user and k in user.claims},
            },
        )
        audit_store.add(batch, self._db, entry)
        batch.commit()

    def _commit(self, view: AdminView, entry: AuditEntry) -> None:
        batch = self._db.batch()
        batch.set(
            admins_collection(self._db).document(view.uid),
            view.model_dump(exclude={"uid"}) | {"invited_at": view.invited_at},
        )
        audit_store.add(batch, self._db, entry)
        batch.commit()


def bootstrap_owner(service: AdminService, *, email: str, at: datetime) -> AdminView:
    """The first owner, made by an operator's command rather than by another owner."""
    audit = AuditContext(actor=Actor(uid="scripts/grant_owner"), at=at)
    return service.invite(email=email, role=AdminRole.OWNER, audit=audit)
