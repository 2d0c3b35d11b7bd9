"""The GPU suite (``make gpu-check``): every case of ``tests/gpu/cases.py`` in a process of its
own, several at a time; one table (case, rc, seconds, first error line); exit 1 on a failure.

    python -m tests.gpu.run                 # on a machine with CUDA
    python -m tests.gpu.run --cpu-check     # the same cases on the CPU, under the device check
    python -m tests.gpu.run --only PPO,DQN  # some cases

Without CUDA (and without --cpu-check) it says so in one line and exits 0.
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_case(name: str, cpu_check: bool) -> int:
    """In this process: one case; its error's first line on stderr's last line."""
    from tests.gpu.cases import CASES

    try:
        skipped = CASES[name](cpu_check)
    except Exception as e:  # the table's column: the exception, in one line
        traceback.print_exc()
        lines = " ".join(line.strip() for line in str(e).strip().splitlines()[:3])
        print(f"{type(e).__name__}: {lines}", file=sys.stderr)
        return 1
    if skipped:
        print(skipped)
    return 0


def _first_error(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return lines[-1][:160] if lines else ""


def spawn_case(name: str, cpu_check: bool, timeout_s: float, log_dir: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    if cpu_check:
        env["RLMESH_CHECK_DEVICES"] = "1"
    cmd = [sys.executable, "-m", "tests.gpu.run", "--case", name] + (["--cpu-check"] if cpu_check else [])
    start = time.monotonic()
    try:
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=timeout_s, start_new_session=True)
        rc, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as e:
        rc, out = 124, (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = f"timed out after {timeout_s:g} s"
    seconds = time.monotonic() - start
    safe = "".join(c if c.isalnum() else "_" for c in name)
    (log_dir / f"{safe}.log").write_text(f"$ {' '.join(cmd)}\n--- stdout\n{out}\n--- stderr\n{err}\n")
    note = out.strip().splitlines()[-1] if rc == 0 and out.strip().startswith("skipped") else ""
    return {"case": name, "rc": rc, "seconds": seconds,
            "error": note if rc == 0 else _first_error(err)}


def table(rows: list[dict]) -> str:
    lines = ["| case | rc | seconds | first error line |", "| --- | --- | --- | --- |"]
    lines += [f"| {r['case']} | {r['rc']} | {r['seconds']:.1f} | {r['error'].replace('|', '/')} |"
              for r in rows]
    return "\n".join(lines)


def describe_device(cpu_check: bool) -> str:
    import torch

    if cpu_check:
        return f"CPU under RLMESH_CHECK_DEVICES=1 (torch {torch.__version__})"
    names = sorted({torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())})
    return f"{torch.cuda.device_count()} x {', '.join(names)} (torch {torch.__version__})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.gpu.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu-check", action="store_true",
                        help="run the cases on the CPU under the device check (no GPU needed)")
    parser.add_argument("--only", default="", help="comma-separated case names (default: all)")
    parser.add_argument("--jobs", type=int, default=0,
                        help="cases at a time (default: a case per 2 cores, at most 8)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per case")
    parser.add_argument("--logs", default="", help="folder for each case's output")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case:
        return run_case(args.case, args.cpu_check)

    import torch

    if not args.cpu_check and not torch.cuda.is_available():
        print("gpu-check: no CUDA device here (torch.cuda.is_available() is False); nothing run. "
              "`python -m tests.gpu.run --cpu-check` runs the cases on the CPU.")
        return 0
    from tests.gpu.cases import CASES

    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {unknown}; known: {', '.join(CASES)}")
    jobs = args.jobs or max(1, min(8, (os.cpu_count() or 2) // 2))
    log_dir = Path(args.logs or ROOT / "build" / "gpu-check")
    log_dir.mkdir(parents=True, exist_ok=True)
    print(f"gpu-check: {len(names)} cases, {jobs} at a time, on {describe_device(args.cpu_check)}; "
          f"logs in {log_dir}", flush=True)
    start = time.monotonic()
    with ThreadPoolExecutor(jobs) as pool:
        rows = list(pool.map(lambda n: spawn_case(n, args.cpu_check, args.timeout, log_dir), names))
    failed = [r for r in rows if r["rc"] != 0]
    print(table(rows))
    print(f"\n{len(rows) - len(failed)} passed, {len(failed)} failed "
          f"({time.monotonic() - start:.0f} s, {datetime.date.today()})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
