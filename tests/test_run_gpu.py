"""experiments/run_gpu.sh goes on where the last call stopped: run on the CPU (DEVICE=cpu), a
call whose deadline leaves too little time for a step packs the finished ones and names the
rest; the next call, given that archive, runs only the rest."""
import os
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _call(dest: Path, **env) -> str:
    run = subprocess.run(["bash", "experiments/run_gpu.sh", str(dest)], cwd=ROOT, capture_output=True,
                         text=True, timeout=600,
                         env={**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "DEVICE": "cpu", **env})
    assert run.returncode == 0, run.stderr[-2000:]
    return (dest / "progress.txt").read_text()


def test_a_second_call_runs_only_the_steps_the_first_left(tmp_path):
    dest = tmp_path / "out"
    # validation's 20 s fit a 30 s call; io_scaling's expected 75 s do not: left for the next
    first = _call(dest, STEPS="validation io_scaling", DEADLINE="30")
    assert first.startswith("validation rc 0") and first.strip().endswith("steps left: io_scaling")
    with tarfile.open(dest / "results.tgz") as t:
        names = t.getnames()
    assert "done/validation" in names and "results/validation/validation.csv" in names
    assert not any(n.startswith("results/io_scaling") for n in names)
    second = _call(dest, STEPS="validation io_scaling")
    assert second.splitlines() == [second.splitlines()[0], "all steps done"]
    assert second.startswith("io_scaling rc 0")
    with tarfile.open(dest / "results.tgz") as t:
        names = t.getnames()
    assert {"done/validation", "done/io_scaling", "results/io_scaling/io_scaling.csv",
            "results/validation/validation.csv"} <= set(names)
