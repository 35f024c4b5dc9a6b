"""Coupon codes as people type them: the canonical form codes are matched in, code patterns
with a Luhn mod N check character, and the collision space a pattern gives (docs/codes.md).

Canonical form: Unicode NFKC (full-width letters typed on a phone become ASCII), upper case,
every typographic dash a plain `-`, no whitespace and no invisible characters (an import refuses
codes holding either, so dropping them never merges two codes). Coupon ids hash this form, so
`spring-93630d12` and `SPRING-93630D12` are one code. Dashes stay: without a pattern nothing says
whether a dash is part of a code; with one, `fit` drops the typed dashes and puts the pattern's
own back where they belong.

A pattern is literal characters (A-Z, 0-9, `-`) and `#`, one character of the alphabet each.
With `check: "luhn_mod_n"` the pattern's last `#` holds the Luhn mod N check character of the
`#` characters before it (literals are not part of the check: they are the same in every code).
"""

from __future__ import annotations

import math
import unicodedata
from dataclasses import dataclass
from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, StringConstraints, model_validator

# Letters and digits a shopper cannot confuse when typing a code: no 0/O, 1/I/L.
CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
PATTERN_SLOT = "#"
# A pattern needs this many random characters (the check character not counted): fewer make a
# campaign's codes guessable whatever the rate limit (see docs/codes.md).
MIN_RANDOM_CHARACTERS = 6
MAX_PATTERN_LENGTH = 64

# Dashes a keyboard, a phone or a word processor produces instead of `-`.
_DASHES = str.maketrans(dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe63", "-"))


def canonical(code: str) -> str:
    """The form a code is stored under and matched in (see the module)."""
    if code.isascii() and code.isprintable():
        # Most codes: NFKC leaves printable ASCII as it is; only case and spaces remain.
        return "".join(code.upper().split())
    normal = unicodedata.normalize("NFKC", code).upper().translate(_DASHES)
    return "".join(
        ch for ch in normal if not ch.isspace() and unicodedata.category(ch) not in ("Cc", "Cf")
    )


# --- Luhn mod N -------------------------------------------------------------------------------
# Luhn mod N doubles every second character's value. As published, a doubled value is folded
# back as 2x // N + 2x % N, a permutation of 0..N-1 only for an even N. For an odd N (the default
# alphabet has 31 characters) the fold sends 1 and 16 both to 2 and would miss one change in 30
# at a doubled position; there codedrop doubles modulo N instead (2 is invertible modulo an odd
# N), and then every changed character and every swap of two different neighbours is caught.
def _doubled(value: int, n: int) -> int:
    return (2 * value) // n + (2 * value) % n if n % 2 == 0 else (2 * value) % n


def _luhn_sum(values: list[int], n: int, *, double_last: bool) -> int:
    total = 0
    double = double_last
    for value in reversed(values):
        total += _doubled(value, n) if double else value
        double = not double
    return total % n


def luhn_check_character(body: str, alphabet: str) -> str:
    """The character that makes `body` + it a valid Luhn mod N string over `alphabet` (N its
    size)."""
    n = len(alphabet)
    total = _luhn_sum([alphabet.index(char) for char in body], n, double_last=True)
    return alphabet[(n - total) % n]


def luhn_valid(text: str, alphabet: str) -> bool:
    """Whether `text` (every character in `alphabet`) ends with its Luhn mod N check."""
    values = [alphabet.find(char) for char in text]
    if not values or min(values) < 0:
        return False
    return _luhn_sum(values, len(alphabet), double_last=False) == 0


# --- patterns ---------------------------------------------------------------------------------
Pattern = Annotated[
    str,
    StringConstraints(
        min_length=MIN_RANDOM_CHARACTERS, max_length=MAX_PATTERN_LENGTH, pattern=r"^[A-Z0-9#-]+$"
    ),
]
Alphabet = Annotated[str, StringConstraints(min_length=2, max_length=36, pattern=r"^[A-Z0-9]+$")]


class CodeFormat(BaseModel):
    """How a campaign's codes were generated; stored on the campaign and on generation jobs."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    pattern: Pattern
    # Upper-case letters and digits only: a code is matched in any case, so the alphabet cannot
    # tell `a` from `A`, and `-` is the pattern's separator.
    alphabet: Alphabet = CODE_ALPHABET
    check: Literal["luhn_mod_n"] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if len(set(self.alphabet)) != len(self.alphabet):
            raise ValueError("the alphabet repeats a character")
        if self.random_characters < MIN_RANDOM_CHARACTERS:
            raise ValueError(
                f"the pattern needs at least {MIN_RANDOM_CHARACTERS} random characters (#)"
                + (" besides the check character" if self.check else "")
            )
        return self

    @property
    def slots(self) -> int:
        return self.pattern.count(PATTERN_SLOT)

    @property
    def random_characters(self) -> int:
        return self.slots - (1 if self.check else 0)

    def matches(self, code: str) -> bool:
        """Whether `code`, exactly as stored, is one this format generates."""
        return self.fit(code) == code

    def fit(self, typed: str) -> str | None:
        """The code `typed` stands for, in the pattern's exact form, or None if it cannot be
        one: case, spaces and dashes as a cashier types them are forgiven, any other difference
        (a character outside the alphabet, one too many or too few, a wrong check) is not."""
        text = canonical(typed).replace("-", "")
        if len(text) > MAX_PATTERN_LENGTH:
            return None
        out: list[str] = []
        random: list[str] = []
        at = 0
        for slot in self.pattern:
            if slot == "-":
                out.append("-")
                continue
            if at >= len(text):
                return None
            char = text[at]
            if slot == PATTERN_SLOT:
                if char not in self.alphabet:
                    return None
                random.append(char)
            elif char != slot:
                return None
            out.append(char)
            at += 1
        if at != len(text):
            return None
        if self.check and not luhn_valid("".join(random), self.alphabet):
            return None
        return "".join(out)


def legacy_format(*, length: int, prefix: str) -> CodeFormat:
    """The format of `codes:generate` called with a length and a prefix."""
    return CodeFormat(pattern=prefix + PATTERN_SLOT * length)


def template(code_format: CodeFormat) -> str:
    """The pattern as a %-template taking one character per `#` (literals hold no `%`)."""
    return code_format.pattern.replace(PATTERN_SLOT, "%s")


# --- collision space --------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class CollisionSpace:
    """What a pattern leaves a guesser (docs/codes.md quotes these)."""

    well_formed: int  # distinct codes the pattern can produce: the most a campaign can hold
    codes: int  # codes the campaign holds
    hit_odds: float  # chance that one random well-formed guess is one of them
    guesses_for_even_odds: int  # guesses after which a hit is more likely than not


def collision_space(code_format: CodeFormat, *, codes: int) -> CollisionSpace:
    """For a campaign holding `codes` codes of `code_format`. The check character is fixed by
    the others, so it adds nothing to the space: it only turns typos into 400s without a read.
    Guesses are taken as distinct: after g of them the chance of no hit is (1 - p)^g."""
    space = len(code_format.alphabet) ** code_format.random_characters
    if not 0 <= codes <= space:
        raise ValueError(f"a campaign of this pattern holds 0 to {space} codes")
    odds = codes / space
    if odds == 0:
        even = space + 1  # never
    elif odds >= 0.5:
        even = 1
    else:
        # Smallest g with (1 - p)^g <= 1/2, computed without rounding p away for tiny odds.
        even = math.ceil(math.log(0.5) / math.log1p(-odds))
    return CollisionSpace(well_formed=space, codes=codes, hit_odds=odds, guesses_for_even_odds=even)
