"""Standard output as the user pipes it: `export -o -` writes the export there (not a file
named `-`), and a reader that goes away early (`| head -1`) ends any command quietly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "small.rwrec"


def rampwatch(*args: str, cwd: Path | None = None, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rampwatch.app.cli", *args], cwd=cwd, text=True, timeout=120, **kwargs)


@pytest.mark.parametrize("fmt", ["json", "html"])
def test_export_to_dash_writes_standard_output_and_no_file(tmp_path, fmt):
    to_file = rampwatch("export", str(FIXTURE), "--format", fmt, "-o", str(tmp_path / f"x.{fmt}"), capture_output=True)
    assert to_file.returncode == 0, to_file.stderr
    work = tmp_path / "work"
    work.mkdir()
    proc = rampwatch("export", str(FIXTURE), "--format", fmt, "-o", "-", cwd=work, capture_output=True)
    assert proc.returncode == 0, proc.stderr
    assert list(work.iterdir()) == []  # no file named "-"
    assert proc.stdout == (tmp_path / f"x.{fmt}").read_text()  # the export alone, no path line after it
    if fmt == "json":
        assert json.loads(proc.stdout)["completed"] > 0


def test_a_csv_export_to_dash_is_one_line(tmp_path):
    proc = rampwatch("export", str(FIXTURE), "--format", "csv", "-o", "-", cwd=tmp_path, capture_output=True)
    assert proc.returncode == 2
    assert proc.stderr == (
        "rampwatch export: error: -o -: a csv export is two files (requests and series); "
        "give -o a path whose stem names them\n"
    )
    assert list(tmp_path.iterdir()) == []
