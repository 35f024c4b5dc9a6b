"""The floor: the least any claim service must do for the load test's requests, as a function
served by functions-framework like claim_api (the load test's `--floor` runs it beside the
stack, on the same emulators, with claim_api's workers and threads). Never deployed.

- `GET /v1/campaigns/{id}`: the campaign is active (no read: a real service caches it).
- `POST /v1/campaigns/{id}/claims`: the shopper from the ID token (firebase-admin, as
  claim_api checks it); one Firestore create of `floor_claims/{campaign}-{uid}` holding the
  next code index: 201. A create that finds the document (a double click, a retry) reads it
  back: 200 with its code. Once the pool of CODEDROP_FLOOR_CODES is gone: 410 SOLD_OUT, or 200
  for a shopper who holds a code (one read).
- `GET /v1/campaigns/{id}/claims/me`: one read of that document.

Code indexes come from blocks of BLOCK, each leased by one create of
`floor_blocks/{campaign}-{block}` (a block another process leased fails the create: the next one
is tried), so processes and instances never hand out one index twice, at one write per BLOCK
codes. An index whose claim found the shopper's document is given back to this process.
No search, no events, no counters, no checks beyond the token. Reads and creates go through
the same lean paths as codedrop's (GetDocument for one document, commits built as protobufs),
so the floor is not slowed by the client library where codedrop is not.
"""

from __future__ import annotations

import os
import re
import threading

import firebase_admin
import flask
import functions_framework
from firebase_admin import auth as firebase_auth
from google.api_core import exceptions as gexc
from google.auth.credentials import AnonymousCredentials
from google.cloud import firestore

from shared.gcp import writes
from shared.gcp.batched_reads import read_document

BLOCK = 32
CLAIMS = "floor_claims"
BLOCKS = "floor_blocks"
CAMPAIGN = re.compile(r"^/v1/campaigns/([A-Za-z0-9_-]{1,100})(/claims(/me)?)?/?$")
UID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")

_project = os.environ["GOOGLE_CLOUD_PROJECT"]
_codes = int(os.environ["CODEDROP_FLOOR_CODES"])
_db = firestore.Client(project=_project)
_app = firebase_admin.initialize_app(
    AnonymousCredentials(),  # type: ignore[no-untyped-call]
    options={"projectId": _project},
    name="floor",
)


class Pool:
    """This process's code indexes of one campaign: blocks leased one at a time."""

    def __init__(self, campaign: str) -> None:
        self.campaign = campaign
        self.lock = threading.Lock()
        self.given_back: list[int] = []
        self.next_index = self.end = 0
        self.next_block = 0

    def take(self) -> int | None:
        """A code index nobody else holds, or None once every block is leased and used."""
        with self.lock:
            if self.given_back:
                return self.given_back.pop()
            while self.next_index >= self.end:
                block = self.next_block
                if block * BLOCK >= _codes:
                    return None
                self.next_block += 1
                lease = _db.collection(BLOCKS).document(f"{self.campaign}-{block}")
                try:
                    writes.commit_writes(_db, [writes.create(writes.document_name(lease), {})])
                except gexc.AlreadyExists:
                    continue
                self.next_index, self.end = block * BLOCK, min((block + 1) * BLOCK, _codes)
            self.next_index += 1
            return self.next_index - 1

    def give_back(self, index: int) -> None:
        with self.lock:
            self.given_back.append(index)


_pools: dict[str, Pool] = {}
_pools_lock = threading.Lock()


def _pool(campaign: str) -> Pool:
    with _pools_lock:
        return _pools.setdefault(campaign, Pool(campaign))


def _answer(status: int, body: dict[str, object]) -> flask.Response:
    return flask.Response(flask.json.dumps(body), status=status, mimetype="application/json")


def _uid(request: flask.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    if not header.startswith("Bearer "):
        return None
    try:
        claims = firebase_auth.verify_id_token(header.removeprefix("Bearer "), app=_app)
    except (ValueError, firebase_auth.InvalidIdTokenError):
        return None
    uid = claims.get("uid")
    return uid if isinstance(uid, str) and UID.match(uid) else None


def _held(claim: firestore.DocumentReference) -> str | None:
    snapshot = read_document(_db, claim)
    return str((snapshot.to_dict() or {}).get("code")) if snapshot.exists else None


def _claim(campaign: str, claim: firestore.DocumentReference) -> flask.Response:
    pool = _pool(campaign)
    index = pool.take()
    if index is None:
        code = _held(claim)
        if code is None:
            return _answer(410, {"error_code": "SOLD_OUT", "message": "Sold out."})
        return _answer(200, {"code": code})
    code = f"FLOOR-{index:07d}"
    try:
        writes.send_commit(_db, [writes.create(writes.document_name(claim), {"code": code})])
    except gexc.AlreadyExists:
        pool.give_back(index)
        return _answer(200, {"code": _held(claim)})
    return _answer(201, {"code": code})


@functions_framework.http
def floor_claim(request: flask.Request) -> flask.Response:
    match = CAMPAIGN.match(request.path)
    if match is None:
        return _answer(404, {"error_code": "NOT_FOUND"})
    campaign, claims, me = match.groups()
    if not claims:
        return _answer(200, {"campaign_id": campaign, "status": "active"})
    uid = _uid(request)
    if uid is None:
        return _answer(401, {"error_code": "UNAUTHENTICATED"})
    claim = _db.collection(CLAIMS).document(f"{campaign}-{uid}")
    if me:
        code = _held(claim)
        return _answer(200, {"claims": [] if code is None else [{"code": code}]})
    if request.method != "POST":
        return _answer(405, {"error_code": "METHOD_NOT_ALLOWED"})
    return _claim(campaign, claim)
