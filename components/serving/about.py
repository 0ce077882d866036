"""What a registered agent is, in one line: its model, its world (the corpus it searches) and its training data.

Written into the served model's config at registration, shown on the version's description and by `agentr1 ask`."""

from __future__ import annotations

from pathlib import Path

from components.config import Config
from components.serving.agent import model_corpus


def weight_count(hf_dir: str | Path) -> int:
    """Parameters stored in a Hugging Face directory's safetensors files (read from their headers)."""
    from safetensors import safe_open

    total = 0
    for path in sorted(Path(hf_dir).glob("*.safetensors")):
        with safe_open(str(path), framework="np") as f:
            for key in f.keys():
                n = 1
                for dim in f.get_slice(key).get_shape():
                    n *= dim
                total += n
    return total


def _count(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n < 10_000_000 else f"{n / 1e6:.0f}M"


def describe(cfg: Config, weights: int, vocab: int) -> str:
    """e.g. "tiny Qwen2 model (0.47M parameters, ...); world: the 'synthetic' corpus ...; trained: ..."."""
    name = cfg.model.name_or_path
    if name == "tiny":
        model = f"tiny Qwen2 model ({_count(weights)} parameters, a {vocab}-token vocabulary learned from the synthetic world)"
    else:
        model = f"{Path(name).name.removesuffix('.gguf')} ({_count(weights)} parameters)"
    corpus = model_corpus(cfg)
    if corpus.startswith("synthetic"):
        syn = cfg.data.synthetic
        world = f"the '{corpus}' corpus, a generated world of {syn.n_entities} people and {syn.n_relations} relations"
    else:
        world = f"the '{corpus}' corpus of Wikipedia passages"
    t = cfg.train
    before = "format priming, then " if name == "tiny" else "a format warm-up, then " if cfg.model.warmup.steps else ""
    steps = f"{t.steps} steps"
    if t.stop_at_target and t.target_em:
        steps = f"at most {steps}, stopping once dev EM reaches {t.target_em}"
    trained = f"{before}{t.algorithm} RL ({t.backend}, {steps}) on the train questions of {', '.join(t.datasets)}"
    return f"{model}; world: {world}; trained: {trained}"
