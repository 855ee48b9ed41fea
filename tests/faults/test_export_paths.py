"""`rampwatch export` never writes over the recording it reads, nor over an existing file
unless asked (`--force`); a failed export leaves no half-written file."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # starts a process or a Textual app (tests/tiers.py)

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "small.rwrec"


def export(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rampwatch.app.cli", "export", *args], capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def recording(tmp_path) -> Path:
    path = tmp_path / "run.rwrec"
    shutil.copy(FIXTURE, path)
    return path


@pytest.mark.parametrize("fmt", ["json", "html"])
def test_export_onto_its_own_recording_is_refused_and_the_recording_kept(recording, fmt):
    before = recording.read_bytes()
    proc = export(str(recording), "--format", fmt, "-o", str(recording))
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"rampwatch export: error: {recording}: is the recording being exported; give the export another path (-o)"
    )
    assert recording.read_bytes() == before


def test_an_existing_output_needs_force(recording, tmp_path):
    out = tmp_path / "result.json"
    out.write_text("keep me")
    refused = export(str(recording), "-o", str(out))
    assert refused.returncode == 2
    assert refused.stderr.strip() == f"rampwatch export: error: {out}: exists; pass --force to overwrite it"
    assert out.read_text() == "keep me"
    forced = export(str(recording), "-o", str(out), "--force")
    assert forced.returncode == 0, forced.stderr
    assert out.read_text().startswith("{")


def test_a_csv_export_checks_both_of_its_files(recording, tmp_path):
    (tmp_path / "run-series.csv").write_text("keep me")
    proc = export(str(recording), "--format", "csv")
    assert proc.returncode == 2 and "run-series.csv: exists; pass --force" in proc.stderr
    assert not (tmp_path / "run-requests.csv").exists()  # nothing written before the refusal


def test_an_unwritable_output_leaves_no_partial_file(recording, tmp_path):
    out = tmp_path / "missing-dir" / "r.json"
    proc = export(str(recording), "-o", str(out))
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"rampwatch export: error: {out}: output directory {out.parent} does not exist"
    assert list(tmp_path.iterdir()) == [recording]
