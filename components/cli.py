"""`agentr1`: one subcommand per pipeline stage, plus `validate-params`, `ask`, `promote`, `rollback`, `summary` and
`dvc-deps`.

The whole pipeline as a Prefect flow is `python -m flows.pipeline`: the library never imports its orchestrator."""

from __future__ import annotations

import gc
import logging
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
import yaml
from rich.console import Console

from components.config import read_yaml
from components.env import apply_defaults
from components.stages import STAGES

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
err = Console(stderr=True)

ParamsOpt = Annotated[Path, typer.Option("--params", "-p", help="The params file to validate and use.")]
SetOpt = Annotated[
    Optional[list[str]],
    typer.Option("--set", "-S", help="Override a param, e.g. -S train.algorithm=ppo (value parsed as YAML)."),
]


def _overrides(pairs: list[str] | None) -> dict:
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"--set expects key=value, got {pair!r}")
        out[key] = read_yaml(value)
    return out


def _known_errors() -> tuple[type[BaseException], ...]:
    from components.config import ConfigError
    from components.data.schema import DataError
    from components.io import DiskFull
    from components.base_model.source import ModelSourceError
    from components.retrieval.base import SearchError

    from components.train.local.checkpoint import CheckpointError
    from components.rollout.vllm_engine import VllmError
    from components.serving.ask import AskError
    from components.registry.promote import PromotionError
    from components.registry.registration import RegistrationError
    from components.tracking.runs import TrackingError

    errors: list[type[BaseException]] = [ConfigError, DataError, ModelSourceError, SearchError, FileNotFoundError,
                                         CheckpointError, PromotionError, AskError, TrackingError, DiskFull,
                                         RegistrationError, VllmError]  # fmt: skip
    try:
        from components.validation.validate import ValidationFailed

        errors.append(ValidationFailed)
    except ImportError:
        pass
    return tuple(errors)


def _info_lines() -> None:
    """The library's info lines (expected conditions worth knowing, e.g. priming at its step cap) on stderr, one
    plain line each; warnings stay for what needs attention."""
    log = logging.getLogger("components")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False


def _run(name: str, params: Path, sets: list[str] | None, **kwargs) -> None:
    apply_defaults()
    _info_lines()
    gc.disable()  # collecting while a stage's libraries import frees nothing; run_stage turns it back on
    from components.config import load_config
    from components.io import disk_full, full_at, out_of_space
    from components.stages import run_stage
    from components.tracking.locks import store_file
    from components.tracking.runs import cli_parent, quiet_full_disk_logs, tracking_uri

    quiet_full_disk_logs()
    cfg = None
    try:
        cfg = load_config(params, _overrides(sets))
        # one pipeline run = one parent run: AGENTR1_PARENT_RUN_ID, else the running `dvc repro`/`dvc exp run`
        with cli_parent(cfg) as parent_run_id:
            metrics = run_stage(name, cfg, parent_run_id=parent_run_id, **kwargs)
    except _known_errors() as e:
        err.print(f"[bold red]agentr1 {name} failed:[/] {e}", markup=True, highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    except Exception as e:  # a full disk that no writer named (e.g. the MLflow store's database): one line too
        if not out_of_space(e):
            raise
        where = full_at(e) or (store_file(tracking_uri(cfg)) if cfg is not None else None) or Path.cwd()
        err.print(f"[bold red]agentr1 {name} failed:[/] {disk_full(where)}", markup=True, highlight=False,
                  soft_wrap=True)  # fmt: skip
        raise typer.Exit(1) from None
    finally:
        gc.enable()  # also when the stage failed before run_stage: no other command runs with the collector off
    done = ", ".join(f"{k}={v:.4g}" for k, v in list(metrics.items())[:8])
    err.print(f"[green]{name} done[/] {done}", highlight=False, soft_wrap=True)


def _add_stage_command(name: str, help_text: str) -> None:
    def command(params: ParamsOpt = Path("params.yaml"), set_: SetOpt = None) -> None:
        _run(name, params, set_)

    app.command(name.replace("_", "-"), help=help_text)(command)


def train(
    params: ParamsOpt = Path("params.yaml"),
    set_: SetOpt = None,
    backend: Annotated[Optional[str], typer.Option(help="local | verl (overrides train.backend)")] = None,
    dry_run: Annotated[bool, typer.Option(help="verl: print the launch command and the config verl accepted.")] = False,
) -> None:
    sets = list(set_ or []) + ([f"train.backend={backend}"] if backend else [])
    if dry_run:
        apply_defaults()
        from components.config import load_config
        from components.train.verl.launch import dry_run as verl_dry_run

        cfg = load_config(params, _overrides(sets))
        verl_dry_run(cfg)
        return
    _run("train", params, sets)


for _name, _stage in STAGES.items():  # `agentr1 --help` lists the stages in pipeline order
    if _name == "train":
        app.command("train", help=_stage.help)(train)
    else:
        _add_stage_command(_name, _stage.help)


@app.command("dvc-deps", help="Rewrite each dvc.yaml stage's components/ deps from the import graph (`make dvc-deps`).")
def dvc_deps() -> None:
    from components.dvc_deps import MissingStage, write

    try:
        changed = write()
    except MissingStage as e:
        err.print(f"[bold red]agentr1 dvc-deps failed:[/] {e}", markup=True, highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    sys.stdout.write("dvc.yaml: code deps rewritten\n" if changed else "dvc.yaml: code deps up to date\n")


@app.command("validate-params", help="Check params.yaml against the schema and print the resolved config.")
def validate_params(params: ParamsOpt = Path("params.yaml"), set_: SetOpt = None) -> None:
    from components.config import ConfigError, load_config

    try:
        cfg = load_config(params, _overrides(set_))
    except ConfigError as e:
        err.print(f"[bold red]{e}[/]", highlight=False)
        raise typer.Exit(1) from None
    sys.stdout.write(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))


@app.command("ask", help="Ask the registered agent (the champion by default) one question and watch it search.")
def ask(
    question: Annotated[str, typer.Argument(help="The question.")],
    version: Annotated[Optional[int], typer.Option("--version", help="Ask this model version.")] = None,
    alias: Annotated[Optional[str], typer.Option("--alias", help="Ask the version under this alias.")] = None,
    corpus: Annotated[Optional[str], typer.Option("--corpus", help="Index to search (default: the model's).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    url: Annotated[Optional[str], typer.Option("--url", help="Ask the model `mlflow models serve` serves there.")] = None,
    params: ParamsOpt = Path("params.yaml"),
    set_: SetOpt = None,
) -> None:
    apply_defaults()
    import json

    from components.config import load_config
    from components.serving.ask import ask as run_ask
    from components.serving.ask import ask_served, render

    if version is not None and alias is not None:
        raise typer.BadParameter("give --version or --alias, not both")
    if url is not None and (version is not None or alias is not None or corpus is not None):
        raise typer.BadParameter("--url asks the served model: no --version, --alias or --corpus")
    gc.disable()  # most of ask's time is importing torch and transformers: collecting meanwhile frees nothing
    try:
        if url is not None:
            answer = ask_served(url, question)
        else:
            answer = run_ask(load_config(params, _overrides(set_)), question, version, alias, corpus)
    except _known_errors() as e:
        err.print(f"[bold red]agentr1 ask failed:[/] {e}", markup=True, highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    finally:
        gc.enable()
    sys.stdout.write((json.dumps(answer.to_dict(), ensure_ascii=False) if as_json else render(answer)) + "\n")


def _move(action: str, params: Path, sets: list[str] | None, **kwargs) -> None:
    apply_defaults()
    from components.config import load_config
    from components.registry import promote as moves

    try:
        move = getattr(moves, action)(load_config(params, _overrides(sets)), **kwargs)
    except _known_errors() as e:
        err.print(f"[bold red]agentr1 {action} failed:[/] {e}", markup=True, highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    old = f"v{move.old_version}" if move.old_version else "none"
    err.print(f"[green]{action}[/] {move.model_name}: {old} -> v{move.new_version} by {move.by} at {move.at}: {move.reason}",
              highlight=False)  # fmt: skip


@app.command("promote", help="Move the champion alias to a registered version that has evaluation metrics.")
def promote(
    version: Annotated[int, typer.Option("--version", help="Model version to make champion.")],
    reason: Annotated[str, typer.Option("--reason", help="Why the champion moves (recorded on the version).")],
    params: ParamsOpt = Path("params.yaml"),
    set_: SetOpt = None,
) -> None:
    _move("promote", params, set_, version=version, reason=reason)


@app.command("rollback", help="Move the champion alias back to the previous champion.")
def rollback(
    reason: Annotated[str, typer.Option("--reason", help="Why (recorded on the version).")] = "rollback",
    params: ParamsOpt = Path("params.yaml"),
    set_: SetOpt = None,
) -> None:
    _move("rollback", params, set_, reason=reason)


@app.command("summary", help="The last run's results: EM per system and set, the champion, the report, the UI.")
def summary(params: ParamsOpt = Path("params.yaml"), set_: SetOpt = None) -> None:
    apply_defaults()
    from components.config import load_config
    from components.evaluation.summary import render

    try:
        text = render(load_config(params, _overrides(set_)))
    except _known_errors() as e:
        err.print(f"[bold red]agentr1 summary failed:[/] {e}", markup=True, highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    sys.stdout.write(text + "\n")


@app.command("baselines", help="The baseline table on real QA for one profile (EM with its 95 % Wilson interval): "
             "direct, naive RAG and the untrained agents per evaluation set; replaces the profile's section of --out.")  # fmt: skip
def baselines(
    profile: Annotated[str, typer.Option(help="The profile to measure.")] = "qwen",
    params: ParamsOpt = Path("params.yaml"),
    set_: SetOpt = None,
    limit: Annotated[Optional[int], typer.Option(help="First N questions of each set (default: evaluate.sets).")] = None,
    full: Annotated[bool, typer.Option("--full", help="Every question of each set (the paper's table).")] = False,
    systems: Annotated[Optional[list[str]], typer.Option(
        help="Comma-separated or repeated (default: direct, naive_rag, pretrained_agent, and base_agent when "
        "model.warmup.steps > 0).")] = None,  # fmt: skip
    out: Annotated[Path, typer.Option(help="The Markdown file whose section the table replaces.")] = Path("docs/benchmarks.md"),
    note: Annotated[str, typer.Option(help="A line under the section's heading (e.g. what is unusual).")] = "",
    raw: Annotated[Optional[Path], typer.Option(
        help="Per-question results (JSON); default artifacts/bench/baselines-<profile>.json.")] = None,  # fmt: skip
    resume: Annotated[bool, typer.Option("--resume", help="Keep the systems and sets --raw holds; measure the rest.")] = False,
) -> None:
    apply_defaults()
    _overrides(set_)  # key=value, or a usage error
    from components.evaluation.baseline_table import run

    chosen = [s for item in systems or [] for s in item.split(",") if s] or None
    try:
        run(profile, params, set_, limit, full, chosen, out, note, raw, resume)
    except _known_errors() as e:
        err.print(f"[bold red]agentr1 baselines failed:[/] {e}", markup=True, highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None


@app.command("profile-report", help="A real-model profile end to end from prepared data (base_model, train, "
             "evaluate), then its report: EM/F1 per system and set, paired-bootstrap comparisons, the dev curve.")  # fmt: skip
def profile_report(
    params: ParamsOpt = Path("params.yaml"),
    set_: SetOpt = None,
    stages: Annotated[str, typer.Option(
        help="Comma-separated; empty to only render the report of a finished run (e.g. dvc exp run).")] = "base_model,train,evaluate",  # fmt: skip
    out: Annotated[Path, typer.Option(help="The report (Markdown).")] = Path("benchmarks/results/real_model.md"),
    untracked: Annotated[bool, typer.Option("--untracked", help="Run the stages without MLflow (a GPU node without it).")] = False,
) -> None:
    import time

    apply_defaults()
    from components.config import load_config
    from components.evaluation.profile_report import write
    from components.stages import run_stage

    overrides = {"profile": "real"} | _overrides(set_)
    try:
        cfg = load_config(params, overrides)
        seconds = {}
        for stage in filter(None, stages.split(",")):
            t0 = time.perf_counter()
            run_stage(stage, cfg, track=not untracked)
            seconds[stage] = time.perf_counter() - t0
            err.print(f"{stage}: {seconds[stage]:.0f} s", highlight=False)
        lines = write(cfg, overrides, seconds, out)
    except _known_errors() as e:
        err.print(f"[bold red]agentr1 profile-report failed:[/] {e}", markup=True, highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    sys.stdout.write("\n".join(lines) + "\n")

def main() -> None:
    """The `agentr1` console script: one command per process."""
    try:
        app()
    finally:
        gc.freeze()  # the collector skips torch's, transformers' and verl's objects at exit: 1-2 s less per stage


if __name__ == "__main__":
    main()
