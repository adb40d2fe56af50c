"""The README's Quickstart runs as written (on SimGPU here, CUDA where there is one)."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _quickstart() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Quickstart"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_quickstart_runs_as_written(tmp_path):
    code = _quickstart()
    assert "ctl.record(" in code and "ctl.analyze(" in code
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "cutimeline report" in done.stdout
    for name in ("timeline.png", "run.json.gz", "run.ctl"):
        assert (tmp_path / name).stat().st_size > 0
