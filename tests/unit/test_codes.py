"""Codes as people type them (shared/codes.py): the canonical form, patterns, the Luhn mod N
check character, and the collision space docs/codes.md quotes."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from shared.codes import (
    CODE_ALPHABET,
    CodeFormat,
    canonical,
    collision_space,
    luhn_check_character,
    luhn_valid,
)
from shared.intake.generator import generate_codes
from shared.intake.models import GenerateCodes

SALE = CodeFormat(pattern="SALE-####-####", check="luhn_mod_n")


@pytest.mark.parametrize(
    ("typed", "stored"),
    [
        ("spring-93630d12", "SPRING-93630D12"),
        ("  Spring-93630D12 ", "SPRING-93630D12"),
        (  # a phone's full-width keyboard
            "\uff53\uff50\uff52\uff49\uff4e\uff47\uff0d\uff19\uff13\uff16\uff13\uff10\uff44\uff11\uff12",
            "SPRING-93630D12",
        ),
        ("SPRING\u201393630D12", "SPRING-93630D12"),  # an en dash from a word processor
        ("SPRING-9363\u200b0D12", "SPRING-93630D12"),  # a zero-width space pasted along
    ],
)
def test_the_canonical_form_forgives_case_width_dashes_and_invisible_characters(
    typed: str, stored: str
) -> None:
    assert canonical(typed) == canonical(stored) == stored


@given(st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126)))
def test_the_ascii_shortcut_agrees_with_the_whole_rule(code: str) -> None:
    # A zero-width space (dropped) sends the same code through the Unicode path.
    assert canonical(code) == canonical(code + "\u200b")


def test_without_a_pattern_dashes_are_part_of_the_code() -> None:
    assert canonical("SPRING93630D12") != canonical("SPRING-93630D12")


# An even alphabet takes the published Luhn mod N (see shared/codes.py): 0-9 and A-V.
EVEN = "0123456789ABCDEFGHIJKLMNOPQRSTUV"


@pytest.mark.parametrize("alphabet", [CODE_ALPHABET, EVEN])
@given(data=st.data())
def test_a_body_with_its_check_character_is_valid(alphabet: str, data: st.DataObject) -> None:
    body = data.draw(st.text(alphabet=alphabet, min_size=1, max_size=20))
    assert luhn_valid(body + luhn_check_character(body, alphabet), alphabet)


@pytest.mark.parametrize("alphabet", [CODE_ALPHABET, EVEN])
@given(data=st.data())
def test_every_single_changed_character_is_caught(alphabet: str, data: st.DataObject) -> None:
    body = data.draw(st.text(alphabet=alphabet, min_size=1, max_size=20))
    code = body + luhn_check_character(body, alphabet)
    at = data.draw(st.integers(0, len(code) - 1))
    other = data.draw(st.sampled_from(alphabet).filter(lambda c: c != code[at]))
    assert not luhn_valid(code[:at] + other + code[at + 1 :], alphabet)


def swaps_missed(alphabet: str) -> int:
    """Swaps of two different neighbours that keep a code valid, over every pair."""
    missed = 0
    for a, b in itertools.permutations(alphabet, 2):
        for lead in ("", alphabet[3]):  # the pair at a doubled and at a plain position
            body = lead + a + b + alphabet[5] + alphabet[7]
            code = body + luhn_check_character(body, alphabet)
            swapped = lead + b + a + code[len(lead) + 2 :]
            missed += luhn_valid(swapped, alphabet)
    return missed


def test_every_swap_of_neighbours_is_caught_over_the_default_alphabet() -> None:
    assert swaps_missed(CODE_ALPHABET) == 0


def test_the_published_luhn_mod_n_misses_only_its_one_swap() -> None:
    """Over an even N the published algorithm misses a swap only of the pair whose doubled
    values agree with the plain ones (0 and N-1, like 09 and 90 in Luhn's digits)."""
    assert swaps_missed(EVEN) == 4  # 0V and V0, at a doubled and at a plain position


def test_generated_codes_fit_their_pattern_and_carry_a_valid_check() -> None:
    codes = list(generate_codes(2000, code_format=SALE))

    assert len(set(codes)) == 2000
    for code in codes:
        assert SALE.matches(code)
        assert (len(code), code[:5], code[9]) == (14, "SALE-", "-")
        random = code[5:9] + code[10:14]
        assert set(random) <= set(CODE_ALPHABET)
        assert luhn_valid(random, CODE_ALPHABET)


@given(st.data())
def test_a_code_fits_however_a_cashier_types_it(data: st.DataObject) -> None:
    code = next(generate_codes(1, code_format=SALE))
    typed = "".join(data.draw(st.sampled_from([ch.lower(), ch, f" {ch}", f"{ch}-"])) for ch in code)
    assert SALE.fit(typed) == code


@pytest.mark.parametrize(
    "typed",
    [
        "SALE-ABCD-EFG",  # a character short
        "SALE-ABCD-EFGHJ",  # one too many
        "SALX-ABCD-EFGH",  # the literal mistyped
        "SALE-0BCD-EFGH",  # 0 is not in the alphabet
        "",
    ],
)
def test_what_cannot_be_a_code_of_the_pattern_does_not_fit(typed: str) -> None:
    assert SALE.fit(typed) is None


def test_a_typo_in_a_checked_code_does_not_fit() -> None:
    code = next(generate_codes(1, code_format=SALE))
    typo = code[:5] + ("B" if code[5] != "B" else "C") + code[6:]
    assert SALE.fit(code) == code
    assert SALE.fit(typo) is None


@pytest.mark.parametrize(
    "fields",
    [
        {"pattern": "AB-#####"},  # five random characters
        {"pattern": "######", "check": "luhn_mod_n"},  # five besides the check
        {"pattern": "sale-######"},  # lower case would be matched as upper case
        {"pattern": "SALE_######"},
        {"pattern": "######", "alphabet": "ABCA"},
        {"pattern": "######", "alphabet": "abcdef"},
        {"pattern": "######", "alphabet": "A-B"},
    ],
)
def test_formats_a_campaign_could_not_match_are_refused(fields: dict[str, str]) -> None:
    with pytest.raises(ValidationError):
        CodeFormat(**fields)  # type: ignore[arg-type]


def test_a_generation_takes_a_pattern_or_a_length_and_prefix() -> None:
    legacy = GenerateCodes.model_validate_json('{"count": 5, "length": 8, "prefix": "BF-"}')
    patterned = GenerateCodes.model_validate_json(
        '{"count": 5, "pattern": "SALE-####-####", "check": "luhn_mod_n"}'
    )

    assert legacy.code_format() == CodeFormat(pattern="BF-########")
    assert patterned.code_format() == SALE
    with pytest.raises(ValidationError):
        GenerateCodes.model_validate_json('{"count": 5, "pattern": "######", "length": 8}')


def test_the_collision_space_of_the_documented_example() -> None:
    """The figures docs/codes.md quotes for SALE-####-#### with a check character."""
    space = collision_space(SALE, codes=1_000_000)

    assert space.well_formed == 31**7 == 27_512_614_111
    assert space.hit_odds == pytest.approx(1_000_000 / 31**7)
    assert space.hit_odds == pytest.approx(3.63e-5, rel=1e-2)
    # (1 - p)^g <= 1/2 first at g = 19,070.
    assert space.guesses_for_even_odds == 19_070
    assert (1 - space.hit_odds) ** 19_070 <= 0.5 < (1 - space.hit_odds) ** 19_069


@pytest.mark.parametrize(
    ("code_format", "well_formed", "even_odds"),
    [
        (SALE, 27_512_614_111, 19_070),
        (CodeFormat(pattern="SALE-####-####"), 852_891_037_441, 591_179),
        (CodeFormat(pattern="#" * 10), 819_628_286_980_801, 568_123_036),
    ],
)
def test_the_collision_space_table_of_the_docs(
    code_format: CodeFormat, well_formed: int, even_odds: int
) -> None:
    """docs/codes.md's table: a campaign of 1,000,000 codes."""
    space = collision_space(code_format, codes=1_000_000)
    assert (space.well_formed, space.guesses_for_even_odds) == (well_formed, even_odds)
    assert space.hit_odds == 1_000_000 / well_formed


def test_the_collision_space_at_its_edges() -> None:
    unchecked = CodeFormat(pattern="SALE-####-####")
    assert collision_space(unchecked, codes=0).guesses_for_even_odds == 31**8 + 1
    assert collision_space(unchecked, codes=31**8).hit_odds == 1
    with pytest.raises(ValueError, match="holds 0 to"):
        collision_space(unchecked, codes=31**8 + 1)
