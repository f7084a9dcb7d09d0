"""The README, the docs pages and the project files stay honest: every relative link (and its #anchor) resolves, the
README stays a short page that opens with the two commands, no page points at an issue number, and the license and
citation files agree with the package."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")  # [text](target) and ![alt](target)


def prose(text: str) -> str:
    """The text outside fenced code blocks and inline code spans: where markdown links and headings live."""
    text = re.sub(r"^```.*?^```[^\n]*$", "", text, flags=re.DOTALL | re.MULTILINE)
    return re.sub(r"`[^`\n]*`", "", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its rendered text, stripped and lowercased, without characters that are not
    letters, digits, spaces, hyphens or underscores (unicode letters kept), spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading renders as its text
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a page's headings; a repeated heading gets -1, -2, … as on GitHub."""
    seen: dict[str, int] = {}
    out = set()
    for line in re.sub(r"^```.*?^```[^\n]*$", "", text, flags=re.DOTALL | re.MULTILINE).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def test_the_slug_is_githubs_on_headings_of_the_real_pages():
    assert slug("Train short, fine-tune a little longer: context extension with a budget") == \
        "train-short-fine-tune-a-little-longer-context-extension-with-a-budget"
    assert slug("Config groups (`configs/`)") == "config-groups-configs"
    assert slug("Beyond perplexity: does the model use the long context?") == \
        "beyond-perplexity-does-the-model-use-the-long-context"
    assert slug("Several GPUs for one run (DDP)") == "several-gpus-for-one-run-ddp"
    assert slug("Über `eval_variants` × 8") == "über-eval_variants--8"  # unicode letters and _ kept, × dropped
    assert anchors("# Plots\n```\n# not a heading\n```\n## Plots\n## Plots\n") == {"plots", "plots-1", "plots-2"}
    docs = ROOT / "docs"
    assert "train-short-fine-tune-a-little-longer-context-extension-with-a-budget" in \
        anchors((docs / "fine-tuning.md").read_text())
    assert "config-groups-configs" in anchors((docs / "configuration.md").read_text())
    assert "the-default-sweep-every-scheme-three-seeds" in anchors((docs / "results.md").read_text())


def test_every_relative_link_of_the_readme_and_the_docs_resolves():
    assert len(PAGES) > 10, "the docs pages are missing"
    broken, checked = [], 0
    for page in PAGES:
        for target in LINK.findall(prose(page.read_text())):
            if re.match(r"https?://", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            checked += 1
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file or directory)")
            elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest.read_text())):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no heading with that anchor)")
    assert checked > 50, f"only {checked} links found: the link pattern broke"
    assert not broken, "\n".join(broken)


def test_the_readme_is_short_and_opens_with_the_two_commands():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200, f"the README has {len(lines)} lines"
    head = [line for line in lines if line.strip()][:7]
    assert head[0] == "# pe-bench"
    assert head[1] == head[4] == "```bash" and head[3] == head[6] == "```", head
    assert head[2].endswith("pe-bench sweep sweep=paper"), head[2]
    assert head[5].endswith("pytest"), head[5]


def test_no_page_mentions_an_issue_number():
    found = []
    for page in PAGES:
        text = page.read_text()
        found += [f"{page.relative_to(ROOT)}: {m.group(0)}"
                  for m in re.finditer(r"\bissues? #?\d+", text, re.IGNORECASE)]
        without_link_targets = re.sub(r"\]\([^)]*\)", "]()", text)  # a #anchor in a link target is fine
        found += [f"{page.relative_to(ROOT)}: {m.group(0)}"
                  for m in re.finditer(r"(?<![\w&#])#\d+\b", without_link_targets)]
    assert not found, found


def test_the_license_and_citation_files_agree_with_the_package():
    import tomllib

    import yaml

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == {"text": "MIT"}
    assert (ROOT / "LICENSE").read_text().startswith("MIT License\n")
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["license"] == "MIT" and cff["version"] == project["version"]
    assert cff["authors"] and cff["title"].startswith("pe-bench")
    assert any("arXiv:2108.12409" in str(r["identifiers"]) for r in cff["references"])  # the protocol's paper


def test_the_citing_page_cites_only_what_the_registries_declare():
    """docs/citing.md lists the papers of this version's schemes and tasks; every arXiv id on it is one a scheme or
    task declares (a scheme removed or re-cited cannot leave a stale line), and the protocol's paper is there."""
    from pe_bench import schemes, tasks

    declared = " ".join([e.citation for e in schemes.catalog().values()] +
                        [t.citation for t in tasks.registry().values()])
    page = (ROOT / "docs" / "citing.md").read_text()
    ids = set(re.findall(r"arXiv:\d{4}\.\d{4,5}", page))
    assert "arXiv:2108.12409" in ids
    assert {i for i in ids if i not in declared} == set()
    assert all(f"`{name}`" in page for name in schemes.available())


# The README's leaderboard sentences: each fragment as the README writes it, the leaderboard.md summary cells
# (scheme row, column) it quotes, and the value they hold there.
PPL = "perplexity 8L/L (L=64)"
HEADLINE_QUOTES = [
    ("`alibi`, flat in perplexity (8L/L 0.983), keeps passkey to L [L, 2L] and copy to L [L, L] but the multi-key needle "
     "to ≥ 8L [≥ 8L, ≥ 8L]", [("alibi", PPL, "0.983"), ("alibi", "passkey", "L [L, 2L]"), ("alibi", "copy", "L [L, L]"),
                              ("alibi", "needle_multikey", "≥ 8L [≥ 8L, ≥ 8L]")]),
    ("`nope` (8L/L 1.740) holds the multi-key needle to 4L [4L, ≥ 8L] and `rope` (2.060) to 2L [2L, 2L], while "
     "`rope+streaming`, flat at 0.972, holds it to L [L, L]",
     [("nope", PPL, "1.740"), ("nope", "needle_multikey", "4L [4L, ≥ 8L]"), ("rope", PPL, "2.060"),
      ("rope", "needle_multikey", "2L [2L, 2L]"), ("rope+streaming", PPL, "0.972"),
      ("rope+streaming", "needle_multikey", "L [L, L]")]),
]  # every quoted cell has three seeds: a one-seed cell says "(1 seed)" and would not match


def summary_cells(md: str) -> dict[tuple[str, str], str]:
    """(scheme row, column) → cell of leaderboard.md's first summary table (the relative effective length)."""
    table = md.split("**Effective length (absolute)**")[0]
    lines = [line for line in table.splitlines() if line.startswith("| ")]
    cells = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines]
    head = cells[0]
    return {(row[0], col): value for row in cells[1:] for col, value in zip(head, row)}


def test_the_readmes_leaderboard_sentences_quote_the_committed_leaderboard():
    """The three sentences under the leaderboard figure quote results/leaderboard/leaderboard.md, which `pe-bench
    report` writes: each fragment is in the README and each number or cell it quotes is the file's, so a report
    written again with other numbers, or prose edited alone, fails here."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "![effective length by scheme and task" in readme and "(results/leaderboard/leaderboard.png)" in readme
    assert (ROOT / "results" / "leaderboard" / "leaderboard.png").stat().st_size > 10_000
    cells = summary_cells((ROOT / "results" / "leaderboard" / "leaderboard.md").read_text())
    for fragment, quoted in HEADLINE_QUOTES:
        assert fragment in readme, fragment
        for scheme, column, value in quoted:
            assert cells[(scheme, column)] == value, (scheme, column, cells[(scheme, column)], value)
