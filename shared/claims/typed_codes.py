"""Codes as a checkout sends them: fitted to the campaign's code format (shared.codes) before
any coupon is read, so a typo or a guess that no code of the campaign can be is refused for the
price of nothing (400 CODE_MALFORMED). The format comes from the instance's recent copy of the
campaign: a campaign that just became mixed may refuse an uploaded code for that long."""

from __future__ import annotations

from google.cloud import firestore

from shared.cache import RecentReads
from shared.campaigns import store as campaign_store
from shared.codes import CodeFormat
from shared.errors import CodeMalformed


class TypedCodes:
    def __init__(self, *, db: firestore.Client, max_age: float) -> None:
        self._db = db
        self._formats: RecentReads[str, CodeFormat | None] = RecentReads(max_age=max_age)

    def _format(self, campaign_id: str) -> CodeFormat | None:
        return self._formats.get(
            campaign_id,
            lambda: campaign_store.get_campaign(self._db, campaign_id=campaign_id).code_format,
        )

    def matched(self, *, campaign_id: str, typed: str) -> str:
        """The code to look up for `typed` in the campaign (its pattern's exact form when the
        campaign has one); CodeMalformed if no code of the campaign can be it."""
        code_format = self._format(campaign_id)
        if code_format is None:
            return typed
        fitted = code_format.fit(typed)
        if fitted is None:
            raise CodeMalformed(
                f"Codes of this campaign look like {code_format.pattern} "
                f"(# one of {code_format.alphabet}); this one does not."
            )
        return fitted
