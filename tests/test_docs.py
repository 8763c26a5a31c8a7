"""The documentation stays true to the repository: links resolve, the CLI reference covers the parser, every
``docs/semantics.md §N`` the code cites exists, every CHANGELAKE_* variable is documented, the README stays
short, and docs/benchmarks.md is what benchmarks/render_results.py renders. No Spark; a second or two.

Each checker is a function over text, tested first on a small example it must reject, so a checker that
silently finds nothing cannot pass."""

from __future__ import annotations

import argparse
import importlib.util
import re
import unicodedata
from pathlib import Path

import pytest

from tests.helpers import REPO

DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [REPO / "README.md", REPO / "CONTRIBUTING.md", *DOCS]
README_MAX_LINES = 160
#: The section numbers the code cites; renumbering them would silently break every citation.
SEMANTICS_SECTIONS = [
    "1", "1.1", "1.2", "2", "2.1", "2.2", "3", "3.1", "3.2", "3.3", "3.4",
    "4", "4.1", "4.2", "4.3", "4.4", "4.5", "4.6", "4.7", "5", "5.1", "5.2",
    "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16",
]  # fmt: skip
#: Where code that may cite the semantics or read CHANGELAKE_* variables lives (text files only).
CODE_DIRS = ("src", "tests", "spark_apps", "dags", "infra", "dbt_project", "expectations", "benchmarks")
CODE_SUFFIXES = {".py", ".sh", ".yml", ".yaml", ".sql", ".properties", ".md"}
#: Places whose CHANGELAKE_* variables users set; tests and benchmarks have their own.
SETTING_DIRS = ("src", "spark_apps", "dags", "infra", "dbt_project", "expectations")


# --- checkers ---------------------------------------------------------------------------------------------
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def without_code_blocks(text: str) -> str:
    """``text`` without its fenced code blocks (a link or heading in an example is not one)."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped (``_`` and ``-`` kept), spaces -> ``-``."""
    text = heading.strip().lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Every heading anchor of a Markdown page (a repeated heading gets ``-1``, ``-2``, ... as on GitHub)."""
    seen: dict[str, int] = {}
    out = set()
    for line in without_code_blocks(markdown).splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(page: Path, text: str) -> list[str]:
    """Relative links of ``page`` whose file does not exist, or whose ``#anchor`` is no heading there."""
    broken = []
    for target in LINK.findall(without_code_blocks(text)):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no file {file}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text()):
            broken.append(f"{target}: no heading '#{anchor}' in {file.name}")
    return broken


def semantics_headings(markdown: str) -> list[str]:
    """Section numbers of docs/semantics.md: ``## 1. Title``, ``### 1.1 Title``, in order."""
    return re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", markdown, flags=re.MULTILINE)


def semantics_items(markdown: str, section: str) -> set[int]:
    """The numbers of the numbered list items of one top-level section (``12`` -> its ``1.``, ``2.``, ...)."""
    m = re.search(rf"^## {re.escape(section)}\. .*?(?=^## |\Z)", markdown, flags=re.MULTILINE | re.DOTALL)
    return {int(n) for n in re.findall(r"^(\d+)\. ", m.group(0), flags=re.MULTILINE)} if m else set()


CITATION = re.compile(r"docs/semantics\.md((?:\s*(?:,|-|–|and)?\s*§\d+(?:\.\d+)?(?:\s*#\d+)?)+)")


def citations(text: str) -> list[tuple[str, int | None]]:
    """``(section, item)`` for every ``docs/semantics.md §N`` (or ``§N, §M.K``, ``§A-§B``, ``§12 #3``)."""
    out = []
    for run in CITATION.findall(text):
        for section, item in re.findall(r"§(\d+(?:\.\d+)?)(?:\s*#(\d+))?", run):
            out.append((section, int(item) if item else None))
    return out


def missing_citations(cited: list[tuple[str, int | None]], markdown: str) -> list[str]:
    headings = set(semantics_headings(markdown))
    missing = []
    for section, item in cited:
        if section not in headings:
            missing.append(f"§{section}")
        elif item is not None and item not in semantics_items(markdown, section):
            missing.append(f"§{section} #{item}")
    return missing


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommands of a parser, by name."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def options(parser: argparse.ArgumentParser) -> set[str]:
    """Long option strings (``--x``) of a parser, without ``--help``."""
    return {
        s
        for a in parser._actions
        for s in a.option_strings
        if s.startswith("--") and not isinstance(a, argparse._HelpAction)
    }


def positionals(parser: argparse.ArgumentParser) -> set[str]:
    """Positional arguments of a parser, named as ``--help`` shows them (metavar, else dest)."""
    return {
        a.metavar or a.dest
        for a in parser._actions
        if not a.option_strings and not isinstance(a, argparse._SubParsersAction)
    }


def cli_sections(markdown: str) -> dict[str, str]:
    """docs/cli.md by ``## `` heading: ``changelake <cmd>`` -> ``<cmd>``; other headings keep their text."""
    sections = {}
    for part in re.split(r"^## ", markdown, flags=re.MULTILINE)[1:]:
        title, _, body = part.partition("\n")
        m = re.fullmatch(r"`changelake ([\w-]+)`", title.strip())
        sections[m.group(1) if m else title.strip()] = body
    return sections


def documented_arguments(section: str) -> set[str]:
    """The arguments a command's table documents: the first cell of each row, e.g. ``--up-to`` or ``table``."""
    out = set()
    for cell in re.findall(r"^\| `([^`]+)`", section, flags=re.MULTILINE):
        out.add(cell.split(" ")[0] if cell.startswith("--") else cell.removesuffix(" ..."))
    return out


def cli_problems(parser: argparse.ArgumentParser, markdown: str) -> list[str]:
    """What docs/cli.md gets wrong about ``parser``: commands or arguments missing, or documented but gone."""
    sections = cli_sections(markdown)
    commands = subcommands(parser)
    problems = [f"no section for `changelake {c}`" for c in commands if c not in sections]
    known_headings = {"Global options", "The `spark-submit` entrypoints"}
    problems += [
        f"section for unknown command `{s}`" for s in sections if s not in set(commands) | known_headings
    ]
    global_doc = documented_arguments(sections.get("Global options", ""))
    problems += [f"global option {o} not documented" for o in sorted(options(parser) - global_doc)]
    problems += [f"global option {o} documented but gone" for o in sorted(global_doc - options(parser))]
    for name, sub in commands.items():
        documented = documented_arguments(sections.get(name, ""))
        wanted = options(sub) | positionals(sub)
        problems += [f"{name}: {a} not documented" for a in sorted(wanted - documented)]
        problems += [f"{name}: {a} documented but not in the parser" for a in sorted(documented - wanted)]
    return problems


def environment_variables(root: Path, dirs: tuple[str, ...]) -> dict[str, str]:
    """Every ``CHANGELAKE_*`` name used under ``dirs`` (and the Makefile), with one file that uses it."""
    files = [root / "Makefile"] + [
        p for d in dirs for p in (root / d).rglob("*") if p.is_file() and p.suffix in CODE_SUFFIXES
    ]
    found: dict[str, str] = {}
    for path in files:
        if "__pycache__" in path.parts or "target" in path.relative_to(root).parts:
            continue
        for name in re.findall(r"CHANGELAKE_[A-Z][A-Z_]*[A-Z]", path.read_text(errors="replace")):
            found.setdefault(name, str(path.relative_to(root)))
    return found


def load_module(path: Path):
    """Import a script that is not in a package (benchmarks/render_results.py)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cli_parser() -> argparse.ArgumentParser:
    """The ``changelake`` command's parser, as ``changelake.cli`` builds it."""
    from changelake import cli

    build = getattr(cli, "build_parser", None) or cli._parser
    return build()


# --- the checkers reject what they must ------------------------------------------------------------------
def test_checkers_find_problems(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## 1.2 Some `code`: here\n")
    text = "[ok](other.md#12-some-code-here) [gone](missing.md) [bad](other.md#nope) [web](https://x.org)\n"
    assert broken_links(page, text) == [
        f"missing.md: no file {tmp_path / 'missing.md'}",
        "other.md#nope: no heading '#nope' in other.md",
    ]
    assert broken_links(page, "```\n[in code](missing.md)\n```\n") == []

    doc = "## 1. A\n### 1.1 B\n## 12. C\n1. one\n2. two\n## 13. D\n3. three\n"
    cited = citations(
        "x (docs/semantics.md §1.1, §12 #2) y docs/semantics.md §3-§13 and docs/semantics.md §12 #3"
    )
    assert cited == [("1.1", None), ("12", 2), ("3", None), ("13", None), ("12", 3)]
    assert missing_citations(cited, doc) == ["§3", "§12 #3"]

    parser = argparse.ArgumentParser()
    parser.add_argument("--home")
    sub = parser.add_subparsers(dest="command")
    a = sub.add_parser("apply")
    a.add_argument("table")
    a.add_argument("--up-to")
    sub.add_parser("status")
    markdown = (
        "## Global options\n| `--home HOME` | x |\n"
        "## `changelake apply`\n| `table` | x |\n| `--from-batch N` | gone |\n"
        "## `changelake scan`\n"
    )
    assert cli_problems(parser, markdown) == [
        "no section for `changelake status`",
        "section for unknown command `scan`",
        "apply: --up-to not documented",
        "apply: --from-batch documented but not in the parser",
    ]

    (tmp_path / "src").mkdir()
    (tmp_path / "Makefile").write_text("export CHANGELAKE_HOME ?= x\n")
    (tmp_path / "src" / "m.py").write_text('os.environ.get("CHANGELAKE_NEW_KNOB")  # CHANGELAKE_* prefix\n')
    assert set(environment_variables(tmp_path, ("src",))) == {"CHANGELAKE_HOME", "CHANGELAKE_NEW_KNOB"}


# --- the repository's docs ---------------------------------------------------------------------------------
@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page):
    assert broken_links(page, page.read_text()) == []


def test_readme_is_short():
    lines = (REPO / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move reference material into docs/"


def test_readme_links_every_doc():
    linked = {(REPO / t.partition("#")[0]).resolve() for t in LINK.findall((REPO / "README.md").read_text())}
    assert [d.name for d in DOCS if d.resolve() not in linked] == []


def test_no_references_to_files_outside_the_repository():
    for page in PAGES:
        for forbidden in ("../shared", "design.md", "pk-table-semantics"):
            assert forbidden not in page.read_text(), f"{page.name} cites {forbidden}"


def test_semantics_keeps_its_section_numbers():
    assert semantics_headings((REPO / "docs" / "semantics.md").read_text()) == SEMANTICS_SECTIONS


def test_every_semantics_citation_exists():
    markdown = (REPO / "docs" / "semantics.md").read_text()
    cited: dict[tuple[str, int | None], str] = {}
    for d in CODE_DIRS:
        for path in (REPO / d).rglob("*"):
            if path.is_file() and path.suffix in CODE_SUFFIXES and "__pycache__" not in path.parts:
                for c in citations(path.read_text(errors="replace")):
                    cited.setdefault(c, str(path.relative_to(REPO)))
    assert len(cited) >= 10, "the code's citations were not found; did the citation format change?"
    assert {
        where: missing_citations([c], markdown)
        for c, where in cited.items()
        if missing_citations([c], markdown)
    } == {}


def test_cli_reference_matches_the_parser():
    assert cli_problems(cli_parser(), (REPO / "docs" / "cli.md").read_text()) == []


def test_every_environment_variable_is_documented():
    documented = (REPO / "docs" / "configuration.md").read_text()
    used = environment_variables(REPO, SETTING_DIRS)
    assert len(used) >= 10
    assert {name: where for name, where in used.items() if name not in documented} == {}


def test_benchmarks_page_is_rendered_from_the_results():
    render = load_module(REPO / "benchmarks" / "render_results.py")
    expected = render.render_all()
    assert (REPO / "docs" / "benchmarks.md").read_text() == expected, (
        "docs/benchmarks.md is stale or edited by hand: run .venv/bin/python benchmarks/render_results.py"
    )
