"""The attribute that marks an event for deliver_webhooks, and the subscription filter that
passes only marked events (shared/webhooks/routes.py marks them). Constants only: the deploy and
the local stack read the filter without loading the Firestore client."""

from __future__ import annotations

ATTRIBUTE = "webhooks"
FILTER = f'attributes.{ATTRIBUTE} = "1"'
MARKED = {ATTRIBUTE: "1"}
