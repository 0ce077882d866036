"""One self-contained HTML page per evaluation run: what was evaluated (model, commit, date, params digest), a legend
of the systems and sets, the EM chart and EM/F1 table, the learning curve, and the trajectories with client-side
filters (system, set, correct/wrong). Inline CSS, JS and SVG only, so it draws offline; every inserted text is
HTML-escaped (questions, passages and model output are untrusted)."""

from __future__ import annotations

import html
from collections.abc import Sequence

from components.evaluation.svg import bar_chart, line_chart

MAX_TEXT = 1500  # characters kept of one turn or observation (the page stays bounded)

SYSTEMS = {
    "agent": "the trained agent: the base model after RL, searching over several turns",
    "base_agent": "the same agent loop with the base model before RL (after the format priming or warm-up)",
    "pretrained_agent": "the agent loop with the pretrained model, before the format warm-up",
    "direct": "the pretrained model answering from memory, no search",
    "naive_rag": "the pretrained model answering from the passages one search with the question returns",
}
DATASETS = {
    "synthetic": "the synthetic multi-hop world the agent trained on (held-out questions)",
    "synthetic_cf": "the counterfactual world: the same entities and questions with every fact redrawn, so answers "
                    "come only from search, never from memory",
    "hotpotqa": "HotpotQA, real 2-hop questions over Wikipedia paragraphs",
    "hotpotqa_hf": "HotpotQA (the Hugging Face layout of the first 100 dev questions)",
    "hotpotqa_dev1025": "HotpotQA, 1,025 further official dev questions",
    "2wiki": "2WikiMultiHopQA, questions over two Wikipedia articles",
    "2wikimultihopqa": "2WikiMultiHopQA without paragraphs",
    "musique": "MuSiQue, 2-4 hop questions composed from single-hop ones",
    "nq": "Natural Questions (single-hop)", "triviaqa": "TriviaQA (single-hop)", "popqa": "PopQA (single-hop)",
}  # fmt: skip


def esc(value) -> str:
    return html.escape(str(value), quote=True)


def _cut(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + f" … [{len(text) - MAX_TEXT} more characters]"


def _num(v) -> str:
    return f"{v:.3f}" if isinstance(v, float) else esc(v)


def _table(rows: Sequence[dict]) -> str:
    cols = ["system", "set", "n", "em", "f1", "answered", "searches", "turns"]
    head = "".join(f"<th>{esc(c)}</th>" for c in cols)
    body = "".join(
        f'<tr class="row" data-system="{esc(r["system"])}" data-set="{esc(r["set"])}">'
        + "".join(f"<td>{_num(r.get(c, ''))}</td>" for c in cols) + "</tr>"
        for r in rows
    )  # fmt: skip
    return f'<table id="metrics"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _step(s: dict) -> str:
    if s["kind"] == "model":
        return f'<div class="step model"><span class="role">model</span><pre>{esc(_cut(s["text"]))}</pre></div>'
    latency = (s["end_ns"] - s["start_ns"]) / 1e6 if s["start_ns"] else 0.0
    hits = "".join(f"<li>{esc(h)}</li>" for h in s["hits"])
    return (f'<div class="step tool"><span class="role">tool {esc(s["name"])}</span> '
            f'<span class="query">query: {esc(s["query"]) if s["query"] is not None else "<i>none</i>"}</span> '
            f'<span class="meta">{len(s["hits"])} hits, batch step {latency:.1f} ms</span>'
            f'<ol class="hits">{hits}</ol><pre>{esc(_cut(s["text"]))}</pre></div>')  # fmt: skip


def _trajectory(system: str, set_name: str, r) -> str:
    correct = int(r.em >= 1.0)
    return (
        f'<div class="traj {"ok" if correct else "bad"}" data-system="{esc(system)}" data-set="{esc(set_name)}" '
        f'data-correct="{correct}" data-qid="{esc(r.question_id)}">'
        f'<div class="head"><b>{esc(system)}</b> · {esc(set_name)} · <code>{esc(r.question_id)}</code> · '
        f'EM {r.em:.0f} · F1 {r.f1:.2f} · outcome {r.outcome:+.2f} · process {r.process:+.2f}</div>'
        f'<div class="q">Q: {esc(r.question)}</div><div class="gold">gold: {esc(" | ".join(r.answers))}</div>'
        + "".join(_step(s) for s in r.steps)
        + f'<div class="answer">answer: {esc(r.prediction) if r.prediction is not None else "<i>none</i>"}</div></div>'
    )  # fmt: skip


def _options(id_: str, label: str, values: Sequence[str]) -> str:
    opts = '<option value="">all</option>' + "".join(f'<option value="{esc(v)}">{esc(v)}</option>' for v in values)
    return f'<label>{esc(label)} <select id="{id_}">{opts}</select></label>'


CSS = """body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td:nth-child(-n+2),th{text-align:left}
.filters{position:sticky;top:0;background:#f4f4f4;padding:.6em;border:1px solid #ddd}.filters label{margin-right:1.2em}
.traj{border:1px solid #ccc;border-left:6px solid #c33;margin:.8em 0;padding:.5em .8em}.traj.ok{border-left-color:#2a2}
.head{color:#555}.q{font-weight:600;margin:.3em 0}.gold{color:#666}.step{margin:.3em 0 .3em 1em}
.role{font-weight:600;color:#346}.tool .role{color:#a60}.meta,.query{color:#666;margin-left:.6em}
pre{white-space:pre-wrap;background:#fafafa;border:1px solid #eee;padding:.3em;margin:.2em 0}.answer{font-weight:600}
.hits{margin:.2em 0;color:#555}#context th,#legend th{text-align:left;background:#f4f4f4}#legend td,#context td{text-align:left}
.chart{margin:.5em 1em .5em 0;vertical-align:top}.chart .title{font-weight:600;font-size:13px}.chart .tick,.chart .legend{font-size:11px;fill:#444}.chart .value{font-size:8px;fill:#333}
.chart .label{font-size:12px;fill:#333}.chart .grid{stroke:#eee}.chart .axis{stroke:#888}"""

JS = """const f={system:document.getElementById('f-system'),set:document.getElementById('f-set'),
outcome:document.getElementById('f-outcome')};
function apply(){const s=f.system.value,d=f.set.value,o=f.outcome.value;let n=0;
for(const e of document.querySelectorAll('.traj')){const show=(!s||e.dataset.system===s)&&(!d||e.dataset.set===d)
&&(!o||(o==='correct')===(e.dataset.correct==='1'));e.style.display=show?'':'none';if(show)n++;}
for(const e of document.querySelectorAll('#metrics .row')){e.style.display=(!s||e.dataset.system===s)&&
(!d||e.dataset.set===d)?'':'none';}document.getElementById('shown').textContent=n;}
for(const k in f)f[k].addEventListener('change',apply);apply();"""


def _context(context: dict[str, str]) -> str:
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in context.items())
    return f'<table id="context">{rows}</table>'


def _legend(systems: Sequence[str], sets: Sequence[str]) -> str:
    def row(kind: str, name: str, text: str) -> str:
        return f'<tr data-{kind}="{esc(name)}"><th>{esc(name)}</th><td>{esc(text)}</td></tr>'

    sys_rows = "".join(row("system", s, SYSTEMS.get(s, "")) for s in systems)
    set_rows = "".join(row("set", d, f"{DATASETS.get(d.split('/')[0], d)}; {d.split('/')[-1]} split") for d in sets)
    return (f'<table id="legend"><tr><th colspan="2">systems</th></tr>{sys_rows}'
            f'<tr><th colspan="2">sets</th></tr>{set_rows}</table>')  # fmt: skip


def _curves(curves: dict[str, dict[str, list[tuple[float, float]]]] | None) -> str:
    charts = []
    for id_, (title, y_label, y_range) in {"curve": ("Held-out dev EM/F1 during training", "dev score", (0.0, 1.0)),
                                           "reward-curve": ("Mean training reward per RL step", "reward", None)}.items():  # fmt: skip
        series = {k: v for k, v in (curves or {}).get(id_, {}).items() if v}
        if series:
            charts.append(line_chart(id_, title, series, "RL step", y_label, y_range))
    if not charts:
        return '<p id="curve-missing">No learning curve was recorded for this model (artifacts/train/*.csv).</p>'
    return "".join(charts)


def render(rows: Sequence[dict], results: dict[tuple[str, str], Sequence], cap: int, title: str = "agentr1 evaluation",
           context: dict[str, str] | None = None,
           curves: dict[str, dict[str, list[tuple[float, float]]]] | None = None) -> str:  # fmt: skip
    """`rows`: the per-dataset table; `results[(system, set)]`: that pair's AgentResults (the first `cap` shown);
    `context`: what was evaluated (label -> text); `curves`: {"curve" | "reward-curve": {series: [(step, value)]}}."""
    systems = list(dict.fromkeys(s for s, _ in results))
    sets = list(dict.fromkeys(d for _, d in results))
    em = {(r["system"], r["set"]): r.get("em") for r in rows}
    chart_systems = list(dict.fromkeys(r["system"] for r in rows))
    chart_sets = list(dict.fromkeys(r["set"] for r in rows))
    em_chart = bar_chart("em-chart", "Exact match per set", chart_sets,
                         {s: [em.get((s, d)) for d in chart_sets] for s in chart_systems}, "EM") if rows else ""  # fmt: skip
    legend = _legend(list(dict.fromkeys(chart_systems + systems)), list(dict.fromkeys(chart_sets + sets)))
    shown = {k: list(v)[:cap] for k, v in results.items()}
    total, kept = sum(len(v) for v in results.values()), sum(len(v) for v in shown.values())
    trajs = "".join(_trajectory(s, d, r) for (s, d), rs in shown.items() for r in rs)
    outcome = ('<label>outcome <select id="f-outcome"><option value="">all</option>'
               '<option value="correct">correct only (EM 1)</option><option value="wrong">wrong only (EM 0)</option>'
               '</select></label>')  # fmt: skip
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
        f"<style>{CSS}</style></head><body><h1>{esc(title)}</h1>"
        + (_context(context) if context else "")
        + f"<h2>Systems and sets</h2>{legend}"
        f"<h2>EM / F1 per system and set</h2>{em_chart}{_table(rows)}"
        f"<h2>Learning curve</h2>{_curves(curves)}"
        f'<h2>Trajectories</h2><p id="cap">At most {cap} trajectories per system and set are shown (the first '
        f"questions of each set): {kept} of {total} episodes.</p>"
        f'<div class="filters">{_options("f-system", "system", systems)}{_options("f-set", "set", sets)}{outcome}'
        f'<span><span id="shown">{kept}</span> shown</span></div><div id="trajectories">{trajs}</div>'
        f"<script>{JS}</script></body></html>"
    )
