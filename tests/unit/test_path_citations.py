"""Every repository path that the code's comments and docstrings, the docs or the README cite
exists, and nothing points outside the repository.

A citation is a token of path characters that has a `/` and starts with a top-level folder of the
repository (`shared/claims/`, `docs/api.md`), or starts with `./` or `../`, or ends with a file
extension the repository uses and starts with a folder beside the citing file (`console/api.js`
in web/); a markdown file named alone (`api-notes.md`); and a markdown link's target, with its
anchor. It holds when it names a file or folder relative to the repository's root or to the
citing file's folder (a link: to the page's folder only), or a module without its `.py`
(`shared/gcp/writes`, `shared/gcp/firebase.Revocations`). URLs, absolute paths (`/v1/...`),
placeholders (`imports/{campaign_id}/`, `docs/bench/NAME.json`), what .gitignore keeps out of
the repository (`.venv/`, `build/`) and samples of the reader's own code in a page (js, html and
json blocks) are not citations."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CODE_FOLDERS = ("shared", "functions", "scripts", "devkit", "tests", "web")
SKIPPED_PARTS = {"__pycache__", "node_modules"}
EXTENSIONS = {
    ".py",
    ".md",
    ".js",
    ".cjs",
    ".ts",
    ".json",
    ".toml",
    ".yaml",
    ".yml",
    ".sh",
    ".html",
    ".css",
    ".rules",
    ".lock",
    ".png",
}
# A run of path characters not glued to a word, a dot, a colon or a slash before it: that keeps
# URLs (`https://host/path`) and absolute paths (`/v1/campaigns`) out.
CANDIDATE = re.compile(r"(?<![\w/.:@-])(?:\.\.?/)*[\w.-]+(?:/[\w.-]+)*/?")
LEADING_DOTS = re.compile(r"^(?:\.\.?/)+")
MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
# A segment such as NAME, PID or CAMPAIGN_ID stands for a name: docs/bench/NAME.json.
PLACEHOLDER = re.compile(r"(?:^|[/.-])[A-Z][A-Z_]+(?:$|[/.-])")
READERS_CODE = {"js", "javascript", "ts", "html", "json"}
# A section cited by its title: README "Deploy", docs/architecture.md, "The claim engine".
SECTION = re.compile(r"\b(README|[\w/.-]+\.md)(?:'s)?,? \"([^\"]+)\"")
COMMENT_BREAK = re.compile(r"\s*\n\s*(?:#|//|\*)?\s*")


def _ignored_roots() -> set[str]:
    """What .gitignore keeps out of the repository, by its first path segment."""
    lines = (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    return {
        line.strip().strip("/").split("/")[0]
        for line in lines
        if line.strip() and not line.startswith("#") and "*" not in line
    }


IGNORED = _ignored_roots()
TOP = {entry.name for entry in ROOT.iterdir() if entry.name not in IGNORED and entry.is_dir()}


# --- the text a file cites paths in ---------------------------------------------------------------
def python_prose(source: str) -> Iterator[tuple[int, str]]:
    """Comment blocks and docstrings, with their first line numbers; other strings are data."""
    comments = [
        (token.start[0], token.string)
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    ]
    yield from _blocks(comments)
    for node in ast.walk(ast.parse(source)):
        documented = ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
        if isinstance(node, documented) and (docstring := ast.get_docstring(node, clean=False)):
            yield node.body[0].lineno, docstring


def comment_lines(source: str, markers: tuple[str, ...]) -> Iterator[tuple[int, str]]:
    """Comment blocks of a shell script or a JavaScript file."""
    yield from _blocks(
        (number, line)
        for number, line in enumerate(source.splitlines(), start=1)
        if line.lstrip().startswith(markers) and not line.startswith("#!")
    )


def _blocks(lines: Iterable[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """Comments on consecutive lines as one text: a quoted section name may wrap."""
    start, last = 0, -1
    block: list[str] = []
    for number, line in lines:
        if number != last + 1 and block:
            yield start, "\n".join(block)
            block = []
        if not block:
            start = number
        block.append(line)
        last = number
    if block:
        yield start, "\n".join(block)


def markdown_prose(source: str) -> Iterator[tuple[int, str]]:
    """A page's lines, less the samples of the reader's own code, whose imports name the
    reader's files."""
    own_code = False
    for number, line in enumerate(source.splitlines(), start=1):
        fence = line.strip()
        if fence.startswith("```"):
            own_code = not own_code and fence[3:].strip() in READERS_CODE
            continue
        if not own_code:
            yield number, line


def prose_of(path: Path) -> Iterator[tuple[int, str]]:
    if path.suffix == "" and not path.read_bytes().startswith(b"#!"):
        return  # a data file without an extension
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        yield from python_prose(text)
    elif path.suffix in {".js", ".cjs", ".ts"}:
        yield from comment_lines(text, ("//", "/*", "*"))
    elif path.suffix == ".md":
        yield from markdown_prose(text)
    elif path.suffix == ".sh" or text.startswith("#!"):
        yield from comment_lines(text, ("#",))


def cited_files() -> list[Path]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    pages += [page for page in (ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md") if page.exists()]
    code = [
        path
        for folder in CODE_FOLDERS
        for path in sorted((ROOT / folder).rglob("*"))
        if path.is_file() and not SKIPPED_PARTS & set(path.parts)
    ]
    return pages + [
        path for path in code if path.suffix in {".py", ".js", ".cjs", ".ts", ".sh", ""}
    ]


# --- what a citation is, and whether it holds ----------------------------------------------------
def citations(text: str, cited_in: Path) -> Iterator[str]:
    for match in CANDIDATE.finditer(text):
        token = match.group().rstrip(".-")
        end = match.end()
        if end < len(text) and text[end] in "{<*":
            continue  # a placeholder or a pattern, e.g. imports/{campaign_id}/
        first = LEADING_DOTS.sub("", token).split("/")[0]
        if not first or first in IGNORED:
            continue
        if "/" in token and (LEADING_DOTS.match(token) or first in TOP):
            yield token
        elif "/" in token and Path(token).suffix in EXTENSIONS:
            if (cited_in.parent / first).is_dir():
                yield token
        elif "/" not in token and token.endswith(".md") and not token.startswith("."):
            yield token


def resolves(token: str, cited_in: Path, root: Path = ROOT) -> str | None:
    """Why `token`, cited in `cited_in`, is not a path of `root` (None when it is)."""
    bases = [root, cited_in.parent]
    if token.startswith("../"):
        # A page's links go from its folder; a comment's from the repository's root.
        bases = [cited_in.parent if cited_in.suffix == ".md" else root]
        if not (bases[0] / token).resolve().is_relative_to(root):
            return "points outside the repository"
    elif "/" not in token:
        bases.append(root / "docs")  # a page named alone
    if any(_exists((base / token).resolve(), root) for base in bases):
        return None
    if "/" in token and PLACEHOLDER.search(token):
        return None
    return "does not exist"


def _exists(target: Path, root: Path) -> bool:
    return target.is_relative_to(root) and (target.exists() or _module_of(target))


def _module_of(target: Path) -> bool:
    """`folder/module` or `folder/module.Name`: the module folder/module.py, or a definition in
    it."""
    stem = target.name.partition(".")[0]
    return (target.parent / f"{stem}.py").is_file()


def anchors(page: Path) -> set[str]:
    """The anchors of a markdown page's headings, as GitHub makes them."""
    found: set[str] = set()
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        heading = None if fenced else HEADING.match(line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).replace("`", "").lower())
            slug = slug.replace(" ", "-")
            anchor, n = slug, 1
            while anchor in found:
                anchor, n = f"{slug}-{n}", n + 1
            found.add(anchor)
    return found


def problems_in(path: Path, root: Path = ROOT) -> list[str]:
    problems = []
    relative = path.relative_to(root) if path.is_relative_to(root) else path
    for number, text in prose_of(path):
        rest = text
        if path.suffix == ".md":
            for link in MARKDOWN_LINK.findall(text):
                problems += [
                    f"{relative}:{number}: {link} {why}" for why in _link(link, path, root)
                ]
            rest = MARKDOWN_LINK.sub("]()", text)
        for token in citations(rest, path):
            if why := resolves(token, path, root):
                problems.append(f"{relative}:{number}: {token} {why}")
        for page, title in SECTION.findall(COMMENT_BREAK.sub(" ", text)):
            if why := _section(page, title, path, root):
                problems.append(f'{relative}:{number}: {page} "{title}" {why}')
    return problems


def _section(page: str, title: str, cited_in: Path, root: Path) -> str | None:
    name = "README.md" if page == "README" else page
    if resolves(name, cited_in, root):
        return None  # the page itself is reported as a path
    file = next(
        target
        for base in (root, cited_in.parent, root / "docs")
        if (target := (base / name).resolve()).is_file()
    )
    titles = {_title(line) for line in file.read_text(encoding="utf-8").splitlines()}
    return None if title.lower() in titles else f"names no heading of {file.name}"


def _title(line: str) -> str | None:
    heading = HEADING.match(line)
    return heading.group(1).replace("`", "").lower() if heading else None


def _link(link: str, page: Path, root: Path) -> list[str]:
    if re.match(r"^[a-z]+:", link):
        return []  # https:, mailto:
    target, _, anchor = link.partition("#")
    file = (page.parent / target).resolve() if target else page
    if not file.is_relative_to(root):
        return ["points outside the repository"]
    if not file.exists():
        return ["does not exist"]
    if anchor and file.suffix == ".md" and anchor not in anchors(file):
        return [f"names no heading of {file.name}"]
    return []


# --- the tests -----------------------------------------------------------------------------------
def test_every_cited_path_exists_inside_the_repository() -> None:
    problems = [problem for path in cited_files() for problem in problems_in(path)]
    assert problems == []


@pytest.mark.parametrize(
    ("line", "stale"),
    [
        ("# Counts claims (shared/usage_counters.py has the shards).", "shared/usage_counters.py"),
        ("# The stack polls it (scripts/localstack/storage_notifier.py).", "storage_notifier.py"),
        ('"""Keeps its order (shared/waiting_room.py)."""', "shared/waiting_room.py"),
        ("    # As docs/nothing.md says.", "docs/nothing.md"),
        ("# The contract: ../shared/DESIGN.md.", "outside the repository"),
        ("# A figure from DESIGN.md.", "DESIGN.md"),
        ("# The view (console/missing.js) renders it.", "console/missing.js"),
        ("# See the README.md, then DESIGNS.md.", "DESIGNS.md"),
        ('# Who may call it (see README "Deploying")', "names no heading of README.md"),
        (
            '# Replayed tokens. See docs/architecture.md, "Protecting a\n# sale from robots".',
            "robots",
        ),
    ],
)
def test_a_stale_citation_in_code_is_found(tmp_path: Path, line: str, stale: str) -> None:
    (tmp_path / "console").mkdir()  # console/… beside the module is a relative citation
    module = tmp_path / "module.py"
    module.write_text(f"{line}\nVALUE = 'shared/not_a_citation.py'\n", encoding="utf-8")
    problems = problems_in(module)
    assert len(problems) == 1, problems
    assert stale in problems[0]


def test_a_stale_link_or_anchor_in_a_page_is_found(tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "errors.py").touch()
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\nSee [the API](../README.md), [gone](gone.md), [here](#page), [there](#nowhere)"
        " and `shared/errors.py`, `imports/{campaign_id}/x.csv`, https://example.com/a/b.md,"
        " `/v1/campaigns/x`.\n",
        encoding="utf-8",
    )
    problems = [problem.split(": ", 1)[1] for problem in problems_in(page, tmp_path)]
    assert problems == [
        "../README.md points outside the repository",
        "gone.md does not exist",
        "#nowhere names no heading of page.md",
    ]


def test_what_is_not_a_citation_is_left_alone(tmp_path: Path) -> None:
    module = tmp_path / "module.py"
    module.write_text(
        "# read/write and/or 500/50/5 writes, text/csv, gs://bucket/imports/x.csv,\n"
        "# .venv/bin/python, build/functions, /etc/secrets/shopify, docs/bench/NAME.json,\n"
        "# shared/gcp/firebase.Revocations, shared/gcp/writes, docs/bench/*.json,\n"
        "# tests/emulator/test_attacks.py::test_x, imports/x.csv, console/config.json\n"
        '# see README "Deploy", docs/architecture.md, "Protecting a\n# sale from bots".\n',
        encoding="utf-8",
    )
    assert problems_in(module) == []
