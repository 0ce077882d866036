"""One loader per format family, chosen by `DatasetSpec.format`."""

from __future__ import annotations

from components.data.loaders import hf_hub, hotpotqa, kilt, musique, qa_only
from components.data.loaders.common import Loader

LOADERS: dict[str, Loader] = {
    "hotpotqa_hf": hotpotqa.load_hf,
    "hotpotqa_ircot": hotpotqa.load_ircot,
    "hotpotqa_original": hotpotqa.load_original,
    "musique": musique.load,
    "2wiki": qa_only.load_2wiki,
    "2wiki_context": qa_only.load_2wiki_context,
    "flashrag": qa_only.load_flashrag,
    "kilt": kilt.load,
    "hf_hub": hf_hub.load,
}
