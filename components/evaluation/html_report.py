"""One self-contained HTML page per evaluation run: the EM/F1 table and the trajectories, with client-side
filters (system, set, correct/wrong). Inline CSS and JS only; every inserted text is HTML-escaped (questions,
passages and model output are untrusted)."""

from __future__ import annotations

import html
from collections.abc import Sequence

MAX_TEXT = 1500  # characters kept of one turn or observation (the page stays bounded)


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
.hits{margin:.2em 0;color:#555}"""

JS = """const f={system:document.getElementById('f-system'),set:document.getElementById('f-set'),
outcome:document.getElementById('f-outcome')};
function apply(){const s=f.system.value,d=f.set.value,o=f.outcome.value;let n=0;
for(const e of document.querySelectorAll('.traj')){const show=(!s||e.dataset.system===s)&&(!d||e.dataset.set===d)
&&(!o||(o==='correct')===(e.dataset.correct==='1'));e.style.display=show?'':'none';if(show)n++;}
for(const e of document.querySelectorAll('#metrics .row')){e.style.display=(!s||e.dataset.system===s)&&
(!d||e.dataset.set===d)?'':'none';}document.getElementById('shown').textContent=n;}
for(const k in f)f[k].addEventListener('change',apply);apply();"""


def render(rows: Sequence[dict], results: dict[tuple[str, str], Sequence], cap: int, title: str = "agentr1 evaluation") -> str:
    """`rows`: the per-dataset table; `results[(system, set)]`: that pair's AgentResults (the first `cap` shown)."""
    systems = list(dict.fromkeys(s for s, _ in results))
    sets = list(dict.fromkeys(d for _, d in results))
    shown = {k: list(v)[:cap] for k, v in results.items()}
    total, kept = sum(len(v) for v in results.values()), sum(len(v) for v in shown.values())
    trajs = "".join(_trajectory(s, d, r) for (s, d), rs in shown.items() for r in rs)
    outcome = ('<label>outcome <select id="f-outcome"><option value="">all</option>'
               '<option value="correct">correct only (EM 1)</option><option value="wrong">wrong only (EM 0)</option>'
               '</select></label>')  # fmt: skip
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
        f"<style>{CSS}</style></head><body><h1>{esc(title)}</h1>"
        f"<h2>EM / F1 per system and set</h2>{_table(rows)}"
        f'<h2>Trajectories</h2><p id="cap">At most {cap} trajectories per system and set are shown (the first '
        f"questions of each set): {kept} of {total} episodes.</p>"
        f'<div class="filters">{_options("f-system", "system", systems)}{_options("f-set", "set", sets)}{outcome}'
        f'<span><span id="shown">{kept}</span> shown</span></div><div id="trajectories">{trajs}</div>'
        f"<script>{JS}</script></body></html>"
    )
