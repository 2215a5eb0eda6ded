"""docs/python.md's examples run as written: every ```python block of the page, in order, in one
fresh interpreter started in an empty folder (so the experiments they name are found through the
ServeLab home, as a user's would be outside the source tree), and the catalogue's fields are the
ones the page names."""

import os
import pathlib
import re
import subprocess
import sys

from conftest import BUILD, ROOT

import servelab

PAGE = ROOT / "docs" / "python.md"


def python_blocks(text):
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.M | re.S)


def test_the_pages_examples_run_from_any_folder(tmp_path):
    blocks = python_blocks(PAGE.read_text())
    assert len(blocks) >= 2, "docs/python.md lost its examples"
    script = tmp_path / "examples.py"
    # Each block's last expression is what a reader would see; the script prints nothing of it.
    script.write_text("\n".join(blocks))
    env = dict(os.environ, PYTHONPATH=str(BUILD / "python"))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    # The first block saves its run where it says.
    assert (tmp_path / "out" / "burst-64" / "summary.json").is_file()


def test_the_catalogue_has_the_fields_the_page_names():
    text = PAGE.read_text()
    entry = next(p for p in servelab.policies() if p["params"])
    for field in ("kind", "name", "description", "origin", "params", "python"):
        assert f"`{field}`" in text, field
        assert field in entry, field
    for field in ("name", "type", "default", "min", "max", "doc"):
        assert field in entry["params"][0], field
