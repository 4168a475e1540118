"""Every Python block of README.md, docs/**/*.md (the site), CHANGELOG.md and
bench/RESULTS.md (parts of which the site includes) runs, on the backend of the run, so the
documentation cannot drift from the code.

The convention (README.md states the reader's side of it under "Quick start"):

- A block with a top-level line starting ``asyncio.run(`` or ``if __name__ == "__main__":``
  is a **complete program**. It runs as a script in a subprocess, in an empty working
  directory (which it must leave empty), with ``HOME``,
  ``OPENSQUILLA_STATE_DIR`` and the archive directory inside the test's temporary directory,
  and ``OPENSQUILLA_SESSION_DSN`` naming a fresh database of the test backend. A program
  therefore reads its database from ``OPENSQUILLA_SESSION_DSN`` (with a default for the reader).
- Every other block is a **fragment** that continues the quick start: it runs on its own
  (never after another fragment) in a namespace holding the names of :func:`continuation`
  (``DSN``, ``storage``, ``sessions``, ``key``, and stand-ins for the reader's own values such
  as ``message_id`` and ``keys``), on a fresh database where ``key`` already has a compacted,
  searchable transcript. A fragment with top-level ``await`` runs on the test's event loop;
  one without runs in a worker thread, outside any loop, so synchronous examples (which may
  run a loop of their own) work as written. A fake OpenAI-compatible server is configured in
  ``OPENSQUILLA_SESSION_LLM_BASE_URL``/``_MODEL``, so LLM examples take their model path.
- A block whose first line is ``# not run: <reason>`` is skipped (pseudo-code, a deploy
  script); at most ``MAX_NOT_RUN`` may say so, each with a reason.

Line numbers in failures and tracebacks are the document's own: ``README.md:87``.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from opensquilla.session import SessionManager, SessionStorage

from ..fake_llm import FakeLLM, running
from ..helpers import DSN_ENV, REPO_ROOT

DOCUMENTS = (
    REPO_ROOT / "README.md",
    *sorted((REPO_ROOT / "docs").rglob("*.md")),
    REPO_ROOT / "CHANGELOG.md",
    REPO_ROOT / "bench" / "RESULTS.md",
)
PROGRAM_LINES = ("asyncio.run(", 'if __name__ == "__main__":')
NOT_RUN_PREFIX = "# not run:"
MAX_NOT_RUN = 2
FRAMEWORK_MODULES = ("google_adk", "openai_agents")
OPENING = re.compile(r"^(?P<indent>\s*)```python(?:\s.*)?$")
CLOSING = re.compile(r"^\s*```\s*$")

KEY = "agent:main:main"
OTHER_KEY = "agent:main:release"


@dataclass(frozen=True)
class Snippet:
    path: Path
    line: int  # the document line of the block's first code line
    code: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO_ROOT)}:{self.line}"

    @property
    def is_program(self) -> bool:
        return any(line.startswith(PROGRAM_LINES) for line in self.code.splitlines())

    @property
    def not_run_reason(self) -> str | None:
        first = self.code.lstrip("\n").split("\n", 1)[0].strip()
        return first[len(NOT_RUN_PREFIX) :].strip() if first.startswith(NOT_RUN_PREFIX) else None

    @property
    def padded(self) -> str:
        """The code preceded by blank lines, so its line numbers are the document's."""
        return "\n" * (self.line - 1) + self.code


def extract(path: Path) -> list[Snippet]:
    """The ```python blocks of a Markdown file (indented ones, in lists, dedented)."""
    snippets: list[Snippet] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        opening = OPENING.match(lines[index])
        index += 1
        if opening is None:
            continue
        indent, start, body = len(opening["indent"]), index + 1, []
        while index < len(lines) and not CLOSING.match(lines[index]):
            body.append(lines[index][indent:])
            index += 1
        if index == len(lines):
            raise AssertionError(f"{path.name}:{start - 1}: a ```python block is never closed")
        index += 1
        snippets.append(Snippet(path, start, "\n".join(body) + "\n"))
    return snippets


SNIPPETS = [snippet for document in DOCUMENTS for snippet in extract(document)]
PROGRAMS = [s for s in SNIPPETS if s.not_run_reason is None and s.is_program]
FRAGMENTS = [s for s in SNIPPETS if s.not_run_reason is None and not s.is_program]


def test_the_documents_have_snippets_and_few_are_not_run() -> None:
    assert any(s.path.name == "README.md" for s in PROGRAMS), "README.md lost its program"
    assert len(FRAGMENTS) >= 5, [s.where for s in SNIPPETS]
    not_run = [s for s in SNIPPETS if s.not_run_reason is not None]
    assert all(s.not_run_reason for s in not_run), [
        f"{s.where}: '{NOT_RUN_PREFIX}' needs a reason" for s in not_run if not s.not_run_reason
    ]
    assert len(not_run) <= MAX_NOT_RUN, (
        f"{len(not_run)} blocks are marked '{NOT_RUN_PREFIX}' (at most {MAX_NOT_RUN}): "
        + ", ".join(s.where for s in not_run)
    )


def test_extract_finds_blocks_with_their_lines(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text(
        "text\n```python\na = 1\n```\n- item\n\n  ```python title=x\n  b = 2\n  ```\n"
        "```bash\nc\n```\n",
        encoding="utf-8",
    )
    assert [(s.line, s.code) for s in extract(doc)] == [(3, "a = 1\n"), (8, "b = 2\n")]
    doc.write_text("```python\n# not run: a deploy hook\nx\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="never closed"):
        extract(doc)


def isolate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, database: str) -> Path:
    """Nothing a snippet writes lands outside ``tmp_path``; the DSN names the test database."""
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv(DSN_ENV, database)
    return workdir


@pytest.mark.parametrize("snippet", PROGRAMS, ids=lambda s: s.where)
def test_program_runs(
    snippet: Snippet, database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workdir = isolate(tmp_path, monkeypatch, database)
    program = tmp_path / "program" / snippet.path.name  # tracebacks name the document
    program.parent.mkdir()
    program.write_text(snippet.padded, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(program)],
        cwd=workdir,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=300,  # a hang guard only
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"{snippet.where} (a complete program) failed:\n{done.stderr}", pytrace=False)
    assert not any(workdir.iterdir()), f"{snippet.where} ignored {DSN_ENV}: it wrote files"


async def run_fragment(snippet: Snippet, namespace: dict[str, Any]) -> None:
    """Top-level ``await``: on this loop; none: in a worker thread, outside any loop."""
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    code = compile(snippet.padded, str(snippet.path), "exec", flags=flags)
    try:
        if code.co_flags & inspect.CO_COROUTINE:
            await eval(code, namespace)
        else:
            await asyncio.to_thread(exec, code, namespace)
    except Exception as exc:
        raise AssertionError(
            f"{snippet.where} (a fragment) failed: {type(exc).__name__}: {exc}"
        ) from exc


async def test_fragments_with_await_run_on_the_loop_and_others_off_it() -> None:
    namespace: dict[str, Any] = {}
    here = REPO_ROOT / "README.md"
    awaiting = "import asyncio\nawait asyncio.sleep(0)\nloop = asyncio.get_running_loop()\n"
    await run_fragment(Snippet(here, 1, awaiting), namespace)
    assert namespace["loop"] is asyncio.get_running_loop()
    synchronous = "import asyncio\nran = asyncio.run(asyncio.sleep(0, 'own loop'))\n"
    await run_fragment(Snippet(here, 1, synchronous), namespace)
    assert namespace["ran"] == "own loop"
    with pytest.raises(AssertionError, match=r"^README\.md:7 \(a fragment\) failed: KeyError"):
        await run_fragment(Snippet(here, 7, "{}['missing']\n"), namespace)


def test_examples_import_only_from_the_package_itself() -> None:
    """Every type an example uses is importable from ``opensquilla.session`` (issue 32), and
    the examples import it from there, never from a submodule that may move."""
    imported: dict[str, list[str]] = {}
    for snippet in SNIPPETS:
        tree = ast.parse(snippet.code)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("opensquilla"):
                imported.setdefault(node.module or "", []).append(snippet.where)
            elif isinstance(node, ast.Import):
                assert not any(a.name.startswith("opensquilla.") for a in node.names), snippet.where
    # The framework integrations are the one exception: re-exported from the package they
    # would import their framework with it.
    frameworks = {f"opensquilla.session.integrations.{name}" for name in FRAMEWORK_MODULES}
    assert set(imported) - frameworks == {"opensquilla.session"}, imported


@pytest.fixture
def fake_llm() -> Iterator[FakeLLM]:
    yield from running(reply="summary from the README's model")


async def continuation(storage: SessionStorage, dsn: str) -> dict[str, Any]:
    """What a fragment may use: the quick start's objects, and a session worth reading
    (two compactions' archive and summaries, live messages, a titled second session)."""
    sessions = SessionManager(storage)
    await sessions.get_or_create(KEY)
    for turn in range(40):
        said = f"turn {turn}: the deploy failed on host {turn} (部署失败)"
        await sessions.append_message(KEY, "user", said, token_count=1900)
        await sessions.append_message(KEY, "assistant", f"retrying deploy {turn}", token_count=100)
        if turn in (9, 19):
            await sessions.compact_with_result(KEY, 12_000)
    await sessions.get_or_create(OTHER_KEY, display_name="release notes")
    await sessions.append_message(OTHER_KEY, "user", "draft the release notes", token_count=5)
    oldest = (await sessions.get_canonical_transcript(KEY, limit=1))[0]  # an archived row
    return {
        "asyncio": asyncio,
        "os": os,
        "SessionManager": SessionManager,
        "SessionStorage": SessionStorage,
        "DSN": dsn,
        "storage": storage,
        "sessions": sessions,
        "key": KEY,
        # Stand-ins for the reader's own values:
        "keys": [KEY, OTHER_KEY, "agent:main:missing"],
        "message_id": oldest.message_id,
        "turn_id": "turn-41",
        "reply_id": "reply-41",
    }


@pytest.mark.parametrize("snippet", FRAGMENTS, ids=lambda s: s.where)
async def test_fragment_runs(
    snippet: Snippet,
    database: str,
    fake_llm: FakeLLM,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    isolate(tmp_path, monkeypatch, database)
    monkeypatch.setenv("OPENSQUILLA_SESSION_LLM_BASE_URL", fake_llm.base_url)
    monkeypatch.setenv("OPENSQUILLA_SESSION_LLM_MODEL", "readme-model")
    async with SessionStorage(database) as storage:
        await run_fragment(snippet, await continuation(storage, database))
