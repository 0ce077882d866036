"""Process-wide defaults that change results or speed (components/env.py, tests/conftest.py, the Makefile), checked in
a fresh process."""

import os
import re
import subprocess
import sys

# The same F.linear on copies of its operands at every float offset: equal to the last bit only if MKL's
# result does not depend on alignment. Without MKL_CBWR, 12 of these 210 products differed on an AVX2 EPYC.
ALIGNED = """
import sys
from components.env import apply_defaults
apply_defaults(sys.argv[1])
import torch, torch.nn.functional as F
torch.set_num_threads(1)
g = torch.Generator().manual_seed(0)
differ = 0
SHAPES = [(256, 128, 128), (33, 128, 384), (256, 128, 2048), (7, 128, 128), (1, 128, 2048), (256, 128, 512), (256, 512, 128)]
for n, k, m in SHAPES:
    x, w, b = torch.randn(n, k, generator=g), torch.randn(m, k, generator=g), torch.randn(m, generator=g)
    ref = F.linear(x, w, b)
    for off in range(1, 16):
        xs, ws = torch.empty(n * k + 16), torch.empty(m * k + 16)
        xs[off:off + n * k], ws[off:off + m * k] = x.flatten(), w.flatten()
        differ += not torch.equal(F.linear(xs[off:off + n * k].view(n, k), w, b), ref)
        differ += not torch.equal(F.linear(x, ws[off:off + m * k].view(m, k), b), ref)
print(differ)
"""


def test_a_matmul_gives_the_same_bits_wherever_its_operands_lie(tmp_path, repo_root):
    env = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"}  # as a user's shell has it
    out = subprocess.run([sys.executable, "-c", ALIGNED, str(tmp_path)], cwd=repo_root, env=env, capture_output=True,
                         text=True, timeout=120, check=True)  # fmt: skip
    assert out.stdout.strip() == "0", out.stdout + out.stderr


def test_a_process_a_test_starts_uses_one_torch_thread(repo_root):
    """Two xdist workers share two cores: tests/conftest.py gives each test's processes one thread."""
    cmd = [sys.executable, "-c", "import torch; print(torch.get_num_threads())"]
    out = subprocess.run(cmd, cwd=repo_root, capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "1", out.stdout + out.stderr


def test_make_writes_bytecode_when_the_shell_says_not_to(repo_root):
    """Setup compiles nothing; make clears PYTHONDONTWRITEBYTECODE so each module is compiled once, on first import."""
    probe = 'probe: ; @python3 -c "import sys; print(sys.flags.dont_write_bytecode)"'
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    out = subprocess.run(["make", "--no-print-directory", f"--eval={probe}", "probe"], cwd=repo_root, env=env,
                         capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    assert out.stdout.strip() == "0", out.stdout + out.stderr


def test_a_venv_is_made_even_when_ensurepip_fails(tmp_path, repo_root):
    """scripts/venv.sh (setup's and vLLM's venvs): a Python whose ensurepip step fails still gives a venv with pip."""
    python = tmp_path / "python"
    python.write_text('#!/usr/bin/env bash\n'
                      'if [[ "$1 $2" == "-m venv" && "$3" != "--without-pip" ]]; then\n'
                      '  echo "Error: Command ensurepip returned non-zero exit status 1." >&2; exit 1; fi\n'
                      f'exec {sys.executable} "$@"\n')  # fmt: skip
    python.chmod(0o755)
    venv = tmp_path / "venv"
    out = subprocess.run(["scripts/venv.sh", str(venv), str(python)], cwd=repo_root, capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "failed in ensurepip" in out.stderr
    pip = subprocess.run([venv / "bin" / "python", "-m", "pip", "--version"], capture_output=True, text=True, timeout=60)
    assert pip.returncode == 0 and str(venv) in pip.stdout, pip.stdout + pip.stderr


FULL_DF = """#!/usr/bin/env bash
# df on a disk with 1 GB free: a full disk cannot be made on demand
echo "Filesystem 1024-blocks Used Available Capacity Mounted on"
echo "/dev/full 100000000 98951424 1048576 99% /"
"""


def test_a_venv_the_disk_cannot_hold_stops_before_installing_and_names_it(tmp_path, repo_root):
    """Setup's and vLLM's venvs check the free space first: on a disk with 1 GB free each stops in one line naming the
    venv and the space it needs, and leaves no half-made venv (pip would stop half-way with Errno 28)."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "df").write_text(FULL_DF)
    (fake / "df").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    venv, vllm_venv = tmp_path / "venv", tmp_path / "venv-vllm"
    setup = subprocess.run(["make", "--no-print-directory", f"VENV={venv}", f"{venv}/bin/python"], cwd=repo_root,
                           env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    vllm = subprocess.run(["scripts/vllm-venv.sh", str(vllm_venv), sys.executable], cwd=repo_root, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert setup.returncode != 0 and f"the project's venv ({venv}) needs about 4 GB free on / " in setup.stderr
    assert vllm.returncode == 1 and vllm.stderr.splitlines() == [
        f"vLLM's venv ({vllm_venv}) needs about 4 GB free on / ({tmp_path}); 1.0 GB is free"]
    assert "1.0 GB is free" in setup.stderr and "Traceback" not in setup.stderr + vllm.stderr
    assert not venv.exists() and not vllm_venv.exists()


def test_make_test_on_a_disk_without_room_stops_first_in_one_line(tmp_path, repo_root):
    """`make test` checks the free space before it starts Elasticsearch, the venvs or pytest: on a disk with 1 GB free
    it stops in one line naming what needs the space (the suite writes about 3 GB; without the check: Errno 28 in
    hundreds of tests)."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "df").write_text(FULL_DF)
    (fake / "df").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    done = subprocess.run(["make", "--no-print-directory", "test"], cwd=repo_root, env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode != 0
    # make echoes the recipe; the check's line and make's own are all it printed: nothing after the check ran
    [line, make_error] = done.stderr.splitlines()
    assert line == ("make test (about 3 GB of models and checkouts at its peak) needs about 4 GB free on / (.); "
                    "1.0 GB is free")
    assert re.fullmatch(r"make(\[\d+\])?: \*\*\* \[Makefile:\d+: test\] Error 1", make_error), make_error  # make[1] below make


def test_make_clean_removes_the_store_with_its_locks_and_keeps_the_rest(tmp_path, repo_root):
    """`make clean` removes what runs made, the SQLite store's lock files beside mlflow.db included, and nothing else."""
    made = ["artifacts/x", "mlflow.db", "mlflow.db.setup.lock", "mlflow.db.registry.lock", "mlartifacts/1/m",
            ".prefect/p", "dvc_plots/index.html"]  # fmt: skip
    for rel in [*made, "params.yaml", "data/q.jsonl"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    (tmp_path / "Makefile").write_text((repo_root / "Makefile").read_text())
    done = subprocess.run(["make", "clean"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert left == ["Makefile", "data/q.jsonl", "params.yaml"]


def test_the_space_check_passes_where_the_disk_has_room(tmp_path, repo_root):
    """The real df: a need of 0 GB passes silently, one above the disk's size stops naming the real mount point."""
    ok = subprocess.run(["scripts/need-space.sh", "0", str(tmp_path / "v"), "v"], cwd=repo_root, capture_output=True,
                        text=True, timeout=30)  # fmt: skip
    assert ok.returncode == 0 and ok.stdout + ok.stderr == ""
    size_gb = int(subprocess.run(["df", "-Pk", str(tmp_path)], capture_output=True, text=True).stdout.split()[8]) // 2**20
    mount = subprocess.run(["df", "-P", str(tmp_path)], capture_output=True, text=True).stdout.split()[-1]
    big = subprocess.run(["scripts/need-space.sh", str(size_gb + 1), str(tmp_path / "v"), "v"], cwd=repo_root,
                         capture_output=True, text=True, timeout=30)  # fmt: skip
    assert big.returncode == 1 and big.stderr.startswith(f"v needs about {size_gb + 1} GB free on {mount} ({tmp_path})")
    assert not (tmp_path / "v").exists()
