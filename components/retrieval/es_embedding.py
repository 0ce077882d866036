"""Optional dense embeddings for the ES `dense_vector` field: a local Hugging Face encoder, mean-pooled, unit length.

Used only when `retrieval.elasticsearch.embedding_model` names a local model directory (hub downloads are off);
a missing or unloadable model leaves the index BM25-only, with a warning naming the path and the cause.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger(__name__)


class Embedder:
    def __init__(self, model_dir: str | Path, batch_size: int = 64, max_length: int = 256) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
        self.model = AutoModel.from_pretrained(str(model_dir), local_files_only=True).eval()
        self.dims = int(self.model.config.hidden_size)
        self.batch_size, self.max_length = batch_size, max_length

    def __call__(self, texts: Sequence[str]) -> list[list[float]]:
        torch = self._torch
        out: list[list[float]] = []
        with torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                enc = self.tokenizer(list(texts[start : start + self.batch_size]), padding=True, truncation=True,
                                     max_length=self.max_length, return_tensors="pt")
                hidden = self.model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
                mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
                out.extend(torch.nn.functional.normalize(pooled, dim=-1).tolist())
        return out


def load_embedder(model: str | None) -> Embedder | None:
    if not model:
        return None
    if not Path(model).is_dir():
        log.warning("retrieval.elasticsearch.embedding_model: %s is not a local model directory; BM25 only", model)
        return None
    try:
        return Embedder(model)
    except (OSError, ValueError) as err:
        log.warning("retrieval.elasticsearch.embedding_model: cannot load %s (%s); BM25 only", model, err)
        return None
