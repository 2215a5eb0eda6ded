"""Every Markdown link to a heading (`page.md#anchor` or `#anchor`) in README.md and docs/ names a
heading that exists, by GitHub's rule for anchors: the heading's text lowercased, every character
but letters, digits, spaces, '-' and '_' dropped, spaces made '-', and a repeated one suffixed
-1, -2, ... Links inside fenced code blocks are not links."""

import os
import re

from conftest import ROOT


def anchors_of(path):
    found, seen = set(), {}
    fenced = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        m = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(slug)
        seen[slug] = 0 if n is None else n + 1
        found.add(slug if n is None else f"{slug}-{n + 1}")
    return found


def test_every_link_to_a_heading_resolves():
    pages = [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))
    anchors = {p.resolve(): anchors_of(p) for p in pages}
    broken = []
    for page in pages:
        fenced = False
        for number, line in enumerate(page.read_text().splitlines(), 1):
            if line.startswith("```"):
                fenced = not fenced
            if fenced:
                continue
            for target, anchor in re.findall(r"\]\(([^)\s#]*\.md)?#([^)\s]+)\)", line):
                to = (page.parent / target).resolve() if target else page.resolve()
                if to in anchors and anchor not in anchors[to]:
                    broken.append(f"{os.path.relpath(page, ROOT)}:{number}: {target}#{anchor}")
    assert not broken, "links to missing headings:\n" + "\n".join(broken)
