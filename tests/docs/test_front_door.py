"""The front door (issue 32): a short README whose links work on a package index page, one
documentation URL everywhere, links into the site that name pages and anchors that exist,
and the site's included sections present. ``nox -s docs`` (``mkdocs build --strict``) checks
the site's own links; these checks need no MkDocs and run in every test session."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from opensquilla.session import config
from opensquilla.session.cli.demo import STEP_TERMS, glossary_url

from ..helpers import REPO_ROOT

README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
SITE = config.DOCUMENTATION_URL
LINK = re.compile(r"\]\(([^)\s]+)\)|<(https?://[^>\s]+)>")
INCLUDE = re.compile(r'^--8<-- "(?P<path>[^":]+)(?::(?P<section>[\w-]+))?"\s*$', re.M)
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
EXPLICIT_ANCHOR = re.compile(r'<a id="([^"]+)"></a>')


def pyproject() -> dict:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def mkdocs_setting(name: str) -> str:
    match = re.search(rf"^{name}:\s*(\S+)\s*$", (REPO_ROOT / "mkdocs.yml").read_text(), re.M)
    assert match is not None, f"mkdocs.yml has no {name}"
    return match.group(1)


def links(text: str) -> list[str]:
    return [a or b for a, b in LINK.findall(text)]


def slug(heading: str) -> str:
    """Python-Markdown's toc slug of a heading (code spans and links reduced to their text)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def expanded(path: Path) -> str:
    """A page's Markdown with its ``--8<--`` includes expanded (as pymdownx.snippets does)."""
    text = path.read_text(encoding="utf-8")

    def include(match: re.Match[str]) -> str:
        return section(REPO_ROOT / match["path"], match["section"])

    return INCLUDE.sub(include, text)


def section(path: Path, name: str | None) -> str:
    text = path.read_text(encoding="utf-8")
    if name is None:
        return text
    start, end = f"<!-- --8<-- [start:{name}] -->", f"<!-- --8<-- [end:{name}] -->"
    assert text.count(start) == 1 and text.count(end) == 1, f"{path.name} lacks section {name}"
    return text[text.index(start) + len(start) : text.index(end)]


def anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", expanded(path), flags=re.M | re.S)  # no fenced code
    return {slug(h) for h in HEADING.findall(text)} | set(EXPLICIT_ANCHOR.findall(text))


def page_of(url: str) -> tuple[Path, str | None]:
    """The docs/ file and anchor a site URL names (``reading/#pages`` -> reading.md, pages)."""
    rest = url[len(SITE) :]
    page, _, anchor = rest.partition("#")
    page = page.strip("/")
    return DOCS / f"{page or 'index'}.md", anchor or None


def test_the_readme_is_short_and_the_long_description() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, len(lines)
    assert pyproject()["project"]["readme"] == "README.md"


def test_readme_links_need_no_relative_resolution() -> None:
    """A package index shows the README without its repository: every link is absolute."""
    found = links(README.read_text(encoding="utf-8"))
    assert found
    relative = [link for link in found if not link.startswith("https://")]
    assert relative == []


def test_one_documentation_url_everywhere() -> None:
    urls = pyproject()["project"]["urls"]
    assert urls["Documentation"] == SITE == mkdocs_setting("site_url")
    assert urls["Repository"] == mkdocs_setting("repo_url")
    assert config.GLOSSARY_URL == SITE + "glossary/"


@pytest.mark.parametrize(
    "document",
    [README, REPO_ROOT / "CHANGELOG.md", REPO_ROOT / "bench" / "RESULTS.md", *DOCS.rglob("*.md")],
    ids=lambda p: str(p.relative_to(REPO_ROOT)),
)
def test_links_into_the_site_name_pages_and_anchors_that_exist(document: Path) -> None:
    for url in links(expanded(document)):
        if not url.startswith(SITE):
            continue
        page, anchor = page_of(url)
        assert page.is_file(), f"{document.name}: {url} names no page ({page.name})"
        if anchor is not None:
            assert anchor in anchors(page), f"{document.name}: {url}: no anchor {anchor!r}"


def test_the_demo_links_each_term_to_a_glossary_entry() -> None:
    entries = anchors(DOCS / "glossary.md")
    terms = {term for step in STEP_TERMS.values() for term in step}
    assert {"generation", "epoch", "coverage", "compacted-archive"} <= terms
    assert terms <= entries, terms - entries
    assert glossary_url("coverage") == SITE + "glossary/#coverage"


def test_included_sections_exist() -> None:
    """Every ``--8<--`` include of the site names a file and a section that exist (the site
    shows the README's program and headline table, the changelog and the latest benchmark
    figures from the files themselves, never a copy)."""
    included = []
    for page in DOCS.rglob("*.md"):
        for match in INCLUDE.finditer(page.read_text(encoding="utf-8")):
            included.append((page.name, match["path"], match["section"]))
            section(REPO_ROOT / match["path"], match["section"])
    assert ("index.md", "README.md", "turn") in included
    assert ("changelog.md", "CHANGELOG.md", None) in included


def test_the_changelog_lists_every_schema_revision_and_the_head() -> None:
    from opensquilla.session.db import migrate

    changelog = (REPO_ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    for script in sorted((REPO_ROOT / "alembic" / "versions").glob("*.py")):
        revision = script.name.split("_")[1]
        assert f"- `{revision}` (`{script.name}`" in changelog, script.name
    (head,) = migrate.head_revisions()
    assert f"Schema head: **`{head}`**" in changelog
