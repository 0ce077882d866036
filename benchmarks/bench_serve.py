"""Load benchmark of the served agent: `mlflow models serve` on the champion (the primed tiny agent), 127.0.0.1 only.

For each code tree (--code; e.g. another checkout as the baseline) and each --workers value: the primed tiny agent is
registered by that tree's own code in a temporary project, its server started, and then for each client count
(1, 4, 16, 64) the clients send requests of one question each over keep-alive connections, --requests in all per
level and at most --seconds. Reported per level: requests/s, p50/p95/p99 latency, errors (not HTTP 200, or an answer
other than the one the single client got for that question) and the server's peak RSS (the whole process tree).
--soak N then sends N more requests at the top client count and samples the RSS every N/8: it must not keep growing.

    .venv/bin/python benchmarks/bench_serve.py --code /path/to/baseline --code . --workers 1 --workers 2 --soak 2000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import psutil  # noqa: E402  (a dependency of dvc)

from components.data.synthetic import generate_world  # noqa: E402
from tests.served import free_port, primed_cfg, start, stop, wait_up  # noqa: E402
from components.evaluation.machine import cpu_line  # noqa: E402

# Run by each code tree, in the temporary project: log the primed agent with that tree's code, make it champion.
REGISTER = """
import mlflow
from pathlib import Path
from tests.served import NAME, PRIMED, index_world, primed_cfg
from components.serving.pyfunc import log_agent_model
cfg = primed_cfg(Path.cwd())
index_world(cfg)
with mlflow.start_run():
    info = log_agent_model(cfg, PRIMED, "synthetic")
client = mlflow.MlflowClient()
client.create_registered_model(NAME)
mv = mlflow.register_model(info.model_uri, NAME)
client.set_registered_model_alias(NAME, "champion", mv.version)
"""
QUIET = {"MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
         "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false", "TQDM_DISABLE": "1"}  # fmt: skip


@dataclass
class Level:
    code: str
    workers: int
    clients: int
    requests: int = 0
    errors: int = 0
    wrong: int = 0  # HTTP 200 with an answer other than the single client's
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list, repr=False)
    peak_rss_mb: float = 0.0

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def pct(self, p: float) -> float:
        if not self.latencies:
            return float("nan")
        xs = sorted(self.latencies)
        return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]

    def row(self) -> str:
        return (f"| {self.code} | {self.workers} | {self.clients} | {self.requests} | {self.errors + self.wrong} | "
                f"{self.rps:.1f} | {self.pct(50) * 1e3:.0f} ms | {self.pct(95) * 1e3:.0f} ms | {self.pct(99) * 1e3:.0f} ms | "
                f"{self.peak_rss_mb:.0f} MB |")  # fmt: skip


class RssWatch:
    """Samples the RSS of a process tree every 0.1 s; `peak` since the last reset."""

    def __init__(self, pid: int):
        self.root, self.peak, self._stop = psutil.Process(pid), 0.0, threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def now(self) -> float:
        total = 0
        for p in [self.root, *self.root.children(recursive=True)]:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        return total / 2**20

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            try:
                self.peak = max(self.peak, self.now())
            except psutil.Error:
                return

    def close(self) -> None:
        self._stop.set()


async def _post(reader, writer, host: str, body: bytes) -> tuple[int, bytes]:
    writer.write(f"POST /invocations HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(body)}\r\n\r\n".encode() + body)  # fmt: skip
    await writer.drain()
    status = int((await reader.readline()).split()[1])
    length, close = 0, False
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
        elif name.lower() == "connection" and value.strip().lower() == "close":
            close = True
    data = await reader.readexactly(length)
    if close:
        raise ConnectionResetError("server closed the connection")
    return status, data


async def _client(port: int, jobs: list[str], deadline: float, level: Level, answers: dict[str, str | None],
                  done: list[int]) -> None:  # fmt: skip
    reader = writer = None
    for q in jobs:
        if time.monotonic() > deadline:
            break
        body = json.dumps({"inputs": {"question": [q]}}).encode()
        t0 = time.monotonic()
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            status, data = await asyncio.wait_for(_post(reader, writer, f"127.0.0.1:{port}", body), timeout=300)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError, IndexError):
            status, data = 0, b""
            if writer is not None:
                writer.close()
            reader = writer = None
        level.latencies.append(time.monotonic() - t0)
        level.requests += 1
        done[0] += 1
        if status != 200:
            level.errors += 1
            continue
        answer = json.loads(data)["predictions"][0]["answer"]
        if q in answers and answers[q] != answer:
            level.wrong += 1
        answers.setdefault(q, answer)
    if writer is not None:
        writer.close()


def drive(port: int, questions: list[str], clients: int, n: int, seconds: float, level: Level,
          answers: dict[str, str | None], on_progress=None) -> None:  # fmt: skip
    """`n` requests from `clients` concurrent clients (round robin over `questions`), at most `seconds`."""
    per = [[questions[(c + k * clients) % len(questions)] for k in range(max(1, -(-n // clients)))] for c in range(clients)]
    done = [0]

    async def main() -> None:
        deadline = time.monotonic() + seconds
        tasks = [asyncio.create_task(_client(port, jobs, deadline, level, answers, done)) for jobs in per]
        if on_progress is not None:
            while not all(t.done() for t in tasks):
                on_progress(done[0])
                await asyncio.sleep(0.05)
        await asyncio.gather(*tasks)

    t0 = time.monotonic()
    asyncio.run(main())
    level.seconds = time.monotonic() - t0


def run_code(code: Path, label: str, workers: list[int], levels: list[int], n: int, seconds: float, soak: int,
             questions: list[str]) -> tuple[list[Level], dict]:  # fmt: skip
    results, soak_out = [], {}
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as d:
        project = Path(d)
        env = {**os.environ, **QUIET, "PYTHONPATH": str(code), "MLFLOW_TRACKING_URI": f"sqlite:///{project / 'mlflow.db'}",
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}  # fmt: skip
        subprocess.run([sys.executable, "-c", REGISTER], cwd=project, env=env, check=True, capture_output=True, timeout=900)
        for w in workers:
            port, log = free_port(), project / f"serve-{w}.log"
            cmd = ["mlflow", "models", "serve", "-m", "models:/agentr1-search-agent@champion", "--env-manager", "local",
                   "--host", "127.0.0.1", "-p", str(port), "-w", str(w)]  # fmt: skip
            proc = start(cmd, project, env, log)
            try:
                wait_up(f"http://127.0.0.1:{port}/ping", proc, log, timeout=600)
                rss = RssWatch(proc.pid)
                answers: dict[str, str | None] = {}
                drive(port, questions[:1], 1, 1, seconds, Level(label, w, 1), answers)  # warm-up
                for c in levels:
                    rss.peak = rss.now()
                    level = Level(label, w, c)
                    drive(port, questions, c, max(n, c), seconds, level, answers)
                    level.peak_rss_mb = rss.peak
                    results.append(level)
                    print(level.row(), flush=True)
                if soak:
                    samples: list[tuple[int, float]] = []
                    every = max(1, soak // 8)

                    def sample(k: int) -> None:
                        if k >= (len(samples) + 1) * every:
                            samples.append((k, round(rss.now())))

                    level = Level(label, w, max(levels))
                    drive(port, questions, max(levels), soak, 10 * seconds, level, answers, on_progress=sample)
                    samples.append((level.requests, round(rss.now())))
                    soak_out[f"{label} w{w}"] = {"requests": level.requests, "errors": level.errors + level.wrong,
                                                 "rps": round(level.rps, 1), "rss_mb": samples}  # fmt: skip
                    print(f"soak {label} w{w}: {level.requests} requests, {level.errors + level.wrong} errors, "
                          f"{level.rps:.1f} req/s, RSS MB by requests done: {samples}", flush=True)  # fmt: skip
                rss.close()
            finally:
                stop(proc)
    return results, soak_out


def machine() -> str:
    return f"{cpu_line()}, load average {os.getloadavg()[0]:.1f} at start"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--code", action="append", type=Path, help="a checkout whose code logs and serves (default: this one)")
    ap.add_argument("--workers", action="append", type=int, help="mlflow models serve -w (default: 1)")
    ap.add_argument("--clients", default="1,4,16,64", help="concurrent client counts")
    ap.add_argument("--requests", type=int, default=256, help="requests per level (at least one per client)")
    ap.add_argument("--seconds", type=float, default=120, help="time bound of one level")
    ap.add_argument("--soak", type=int, default=0, help="requests at the top client count, sampling the RSS")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    codes = [c.resolve() for c in (args.code or [REPO])]
    for c in codes:
        if not (c / "components" / "serving" / "pyfunc.py").is_file():
            sys.exit(f"--code {c}: not an agentr1 checkout (no components/serving/pyfunc.py)")
    levels = [int(x) for x in args.clients.split(",")]
    questions = [q.question for q in generate_world(primed_cfg(Path(".")).data.synthetic).questions("dev")]
    print(f"# bench_serve: {machine()}\n")
    print("| code | workers | clients | requests | errors | req/s | p50 | p95 | p99 | server peak RSS |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    rows, soaks = [], {}
    for code in codes:
        label = code.name if code != REPO else f"{code.name} (this)"
        got, soak = run_code(code, label, args.workers or [1], levels, args.requests, args.seconds, args.soak, questions)
        rows += got
        soaks |= soak
    if args.json:
        out = {"machine": machine(), "levels": [asdict(r) | {"rps": r.rps, "p50": r.pct(50), "p95": r.pct(95), "p99": r.pct(99)}
                                                for r in rows], "soak": soaks}  # fmt: skip
        for r in out["levels"]:
            del r["latencies"]
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
