"""A throwaway Hugging Face model dir for tracking tests (the real tiny model comes from components.model.tiny)."""

from pathlib import Path

from components import artifacts
from components.io import write_json


def save_tiny_hf_model(path: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    vocab = {w: i for i, w in enumerate(["<pad>", "<|im_start|>", "<|im_end|>", "<unk>", "hello", "world"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<|im_end|>", unk_token="<unk>")
    config = Qwen2Config(vocab_size=8, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)
    Qwen2ForCausalLM(config).save_pretrained(path)
    fast.save_pretrained(path)
    return path


def train_and_eval(cfg, tmp_path: Path, em: float, baselines: dict[str, float] | None = None) -> None:
    """What the train and evaluate stages leave behind for register: a trained model dir, its logged model, the
    evaluate run with every metric, eval.json. `baselines`: system -> its EM on synthetic/dev (direct: 0.0)."""
    from components.evaluation.eval_json import flat_metrics
    from components.tracking.runs import stage_run

    model_dir = save_tiny_hf_model(tmp_path / f"model-{em}")
    with stage_run(cfg, "train") as tracker:
        uri = tracker.log_model(model_dir, "agent")
    write_json(artifacts.train_model_json(cfg), {"model_uri": uri, "run_id": tracker.run_id, "path": str(model_dir)})
    report = {"em": {"synthetic": {"dev": em}, "hotpotqa": {"dev": em / 2}},
              "baseline": {s: {"em": {"synthetic": {"dev": v}}} for s, v in ({"direct": 0.0} | (baselines or {})).items()}}  # fmt: skip
    with stage_run(cfg, "evaluate") as tracker:
        tracker.log_metrics(flat_metrics(report))
    write_json(artifacts.eval_metrics(cfg), report)
