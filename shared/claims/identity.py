"""Who a per-user limit counts: the account (uid), or a verified phone number or email, in the
canonical form every spelling of one person shares.

A shopper's claim slots live at `claims/{identity_key}-{slot}`, so two accounts behind one
phone number share the same slots and the same atomic `create()` refuses the second code. Bulk
assignments key their recipients with the same functions, so a recipient who also claims on the
landing page as that identity never gets a second code.

Emails (campaign `email_canonicalization`, default "mailbox": one inbox is one identity):
- every address is lower-cased (providers treat local parts case-insensitively in practice);
- everything from the first `+` of the local part is dropped (sub-addressing: `ann+sale@x`
  reaches `ann@x` at Gmail, Outlook, iCloud, Fastmail, Proton and most hosted domains);
- then the provider's own rules, from MAIL_PROVIDERS:

  | domains                   | canonical domain | dots in the local part |
  |---------------------------|------------------|------------------------|
  | gmail.com, googlemail.com | gmail.com        | ignored (dropped)      |

  Providers where the rule is not certain are not folded: Outlook/Hotmail/Live keep dots and are
  separate mailboxes per domain; Yahoo's disposable addresses (`base-keyword@`) cannot be told
  from a hyphenated name. A catch-all domain (any local part reaches one inbox) stays unbounded:
  no rule can see it from the address (docs/security.md).
"address" keeps every address apart, lower-cased only (a campaign whose shoppers legitimately
share an inbox under tags).

Phones: E.164 (`+`, a country code not starting with 0, 7 to 15 ASCII digits), after dropping
the separators spreadsheets carry (spaces, dashes, dots, slashes, parentheses); anything else,
other scripts' digits included, is refused (IDENTITY_INVALID).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from shared.errors import IdentityInvalid
from shared.types import EmailCanonicalization, IdentityKind

__all__ = [
    "E164_PATTERN",
    "MAIL_PROVIDERS",
    "EmailCanonicalization",
    "IdentityKind",
    "MailProvider",
    "canonical",
    "canonical_email",
    "canonical_phone",
    "identity_key",
]

E164_PATTERN = r"^\+[1-9][0-9]{6,14}$"
_E164 = re.compile(E164_PATTERN, re.ASCII)
_PHONE_SEPARATORS = re.compile(r"[ ()./-]")


@dataclass(frozen=True, slots=True)
class MailProvider:
    """A mail provider's addressing rules: which domains reach one mailbox, and whether the
    local part's dots matter."""

    domains: frozenset[str]
    canonical_domain: str
    ignores_dots: bool


MAIL_PROVIDERS: tuple[MailProvider, ...] = (
    # https://support.google.com/mail/answer/7436150 (dots) and /10313 (googlemail.com).
    MailProvider(
        domains=frozenset({"gmail.com", "googlemail.com"}),
        canonical_domain="gmail.com",
        ignores_dots=True,
    ),
)
_PROVIDER_OF = {domain: p for p in MAIL_PROVIDERS for domain in p.domains}


def canonical_email(value: str, rule: EmailCanonicalization = EmailCanonicalization.MAILBOX) -> str:
    address = value.strip().lower()
    local, at, domain = address.rpartition("@")
    domain = domain.rstrip(".")
    if not at or not local or not domain:
        raise IdentityInvalid("The email address has no local part or no domain.")
    if rule is EmailCanonicalization.ADDRESS:
        return f"{local}@{domain}"
    local = local.split("+", 1)[0]
    provider = _PROVIDER_OF.get(domain)
    if provider is not None:
        domain = provider.canonical_domain
        if provider.ignores_dots:
            local = local.replace(".", "")
    if not local:
        raise IdentityInvalid("The email address has no mailbox before its +tag.")
    return f"{local}@{domain}"


def canonical_phone(value: str) -> str:
    number = _PHONE_SEPARATORS.sub("", value.strip())
    if not _E164.match(number):
        raise IdentityInvalid(
            "The phone number is not in international format: +, a country code and 7 to 15 "
            "digits (0-9)."
        )
    return number


def canonical(
    kind: IdentityKind,
    value: str,
    *,
    email_rule: EmailCanonicalization = EmailCanonicalization.MAILBOX,
) -> str:
    """The form every spelling of one identity shares; IdentityInvalid when `value` is not an
    identity of this kind at all."""
    if kind is IdentityKind.EMAIL:
        return canonical_email(value, email_rule)
    if kind is IdentityKind.PHONE:
        return canonical_phone(value)
    return value.strip()


def identity_key(
    kind: IdentityKind,
    value: str,
    *,
    email_rule: EmailCanonicalization = EmailCanonicalization.MAILBOX,
) -> str:
    """A fixed-length document-id-safe key of the canonical identity; a uid keeps the key claims
    have always had."""
    text = canonical(kind, value, email_rule=email_rule)
    if kind is not IdentityKind.UID:
        text = f"{kind.value}:{text}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]
