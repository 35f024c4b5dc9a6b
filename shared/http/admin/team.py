"""The team: who may use the console, invited and removed by owners, and signing out."""

from __future__ import annotations

import flask
from pydantic import TypeAdapter

from shared.audit.models import AuditContext
from shared.control.admins import AdminInvite, AdminList, AdminView
from shared.errors import AdminNotFound, AuthUnavailable, CannotRemoveYourself, OwnerRequired
from shared.http.access import Access
from shared.http.requests import path_id
from shared.http.responses import json_response
from shared.http.routing import Call, Routes, answers, raises
from shared.types import FirebaseUid

routes = Routes()
_UID: TypeAdapter[str] = TypeAdapter(FirebaseUid)


def owner_audit(call: Call) -> AuditContext:
    """An owner's audit context; anyone else is refused."""
    if not call.user.is_owner:
        raise OwnerRequired()
    return call.audit()


@routes.get("/v1/admins", access=Access.ADMIN)
@answers(200, AdminList)
def list_admins(call: Call) -> flask.Response:
    """Who may use the console: admins and owners, who invited them and when."""
    return json_response(call.services.admins.list_admins())


@routes.post("/v1/admins", access=Access.ADMIN, body=AdminInvite)
@answers(201, AdminView)
@raises(OwnerRequired)
def invite_admin(call: Call) -> flask.Response:
    """Owners only: make the user with this email (created if new) an admin or an owner; their
    next ID token carries the claim."""
    body = call.body_as(AdminInvite)
    audit = owner_audit(call)
    view = call.services.admins.invite(email=body.email, role=body.role, audit=audit)
    return json_response(view, 201)


@routes.delete("/v1/admins/<uid>", access=Access.ADMIN)
@answers(204)
@raises(OwnerRequired, AdminNotFound, CannotRemoveYourself)
def remove_admin(call: Call, uid: str) -> flask.Response:
    """Owners only: take the admin (and owner) claim away and end the user's sessions."""
    audit = owner_audit(call)
    uid = path_id(uid, _UID, AdminNotFound, "{} is not an admin.")
    call.services.admins.remove(uid=uid, audit=audit)
    return flask.Response(status=204)


@routes.post("/v1/me:sign_out", access=Access.ADMIN)
@answers(204)
@raises(AuthUnavailable)
def sign_out(call: Call) -> flask.Response:
    """Sign the caller out everywhere: their sessions are revoked, and the token that made this
    call is refused within the revocation check's bound."""
    call.services.admins.sign_out(uid=call.user.user_id)
    return flask.Response(status=204)
