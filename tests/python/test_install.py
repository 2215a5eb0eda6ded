"""`cmake --install` gives an importable module that finds its home without the source tree."""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import BUILD


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake not on PATH")
def test_installed_module_runs_an_experiment(tmp_path):
    prefix = tmp_path / "prefix"
    subprocess.run(["cmake", "--install", str(BUILD), "--prefix", str(prefix),
                    "--component", "Unspecified"], check=True, capture_output=True)
    packages = list(prefix.glob("lib/python3*/*-packages/servelab/__init__.py"))
    assert len(packages) == 1
    env = {k: v for k, v in os.environ.items() if k not in ("SERVELAB_HOME", "PYTHONPATH")}
    env["PYTHONPATH"] = str(packages[0].parent.parent)
    code = ("import servelab; "
            "r = servelab.run(servelab.home + '/experiments/burst-tiny.yaml'); "
            "print(servelab.home, r.summary['requests']['completed'])")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(prefix / "share" / "servelab"), "200"]
