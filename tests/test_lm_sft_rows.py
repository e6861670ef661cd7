"""``proas lm sft-rows``: fine-tuning a model directory on (prompt, response) rows, the loss on the
response tokens only, whole tasks held out, the best epoch saved whole (docs/verl.md, section 10)."""

import json

import pytest
import torch

from proas.cli import main as proas_main
from proas.errors import ProasError
from proas.integrations.verl.verl_agent import sft_examples
from proas.lm.model import load_tokenizer
from proas.lm.sft_rows import (
    RECORD,
    RowsSFTOptions,
    check_generation,
    collate,
    encode_row,
    mean_nll,
    prompt_ids,
    read_rows,
    response_nll,
    split_rows,
)
from proas.lm.tools import build_env_tokenizer, new_model_dir

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def rows():
    # the oracle's walkthroughs of 8 household training tasks in the RL runs' format
    return sft_examples("household", tasks=8)


@pytest.fixture(scope="module")
def rows_file(rows, tmp_path_factory):
    path = tmp_path_factory.mktemp("rows") / "sft.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def tiny_model(rows, tmp_path_factory):
    # a 1-layer model with a tokenizer trained on the rows' text, as the device run trains one
    # on the env's text (a response is about 12 tokens)
    root = tmp_path_factory.mktemp("sft_rows")
    build_env_tokenizer([r["prompt"] for r in rows] + [r["response"] for r in rows], 600, root / "tok")
    new_model_dir(root / "tok", root / "model", "tiny", num_hidden_layers=1)
    return root / "model"


def test_the_loss_is_on_the_response_and_end_of_turn_tokens_only(tiny_model, rows_file):
    from transformers import AutoModelForCausalLM

    tok = load_tokenizer(tiny_model)
    rows = read_rows(rows_file)[:3]
    opts = RowsSFTOptions()
    encoded = [encode_row(tok, r, opts)[:2] for r in rows]
    for r, (ids, n_prompt) in zip(rows, encoded):
        # the prompt as verl-agent's rollout encodes it: the chat template's user turn, then the
        # assistant's generation prompt; the response ends in the end-of-turn token
        assert tok.decode(ids[:n_prompt]) == f"<|im_start|>user\n{r['prompt']}<|im_end|>\n<|im_start|>assistant\n"
        assert ids[:n_prompt] == prompt_ids(tok, r["prompt"])
        assert tok.decode(ids[n_prompt:]) == r["response"] + "<|im_end|>" and ids[-1] == tok.eos_token_id
    batch = collate(encoded, tok.pad_token_id)
    for i, (ids, n_prompt) in enumerate(encoded):
        labels = batch["labels"][i].tolist()
        assert labels[:n_prompt] == [-100] * n_prompt and labels[len(ids):] == [-100] * (len(labels) - len(ids))
        assert labels[n_prompt:len(ids)] == ids[n_prompt:]
        assert batch["attention_mask"][i].sum() == len(ids)
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model), use_safetensors=True)
    nll, n = response_nll(model, batch)
    # by hand, one row at a time with no padding: the response tokens' log-likelihoods only
    want, count = 0.0, 0
    with torch.no_grad():
        for ids, n_prompt in encoded:
            logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), -1)
            want -= sum(float(logp[t - 1, ids[t]]) for t in range(n_prompt, len(ids)))
            count += len(ids) - n_prompt
    assert n == count
    assert float(nll.detach()) == pytest.approx(want, rel=1e-4)


def test_whole_tasks_are_held_out(rows_file):
    rows = read_rows(rows_file)
    train, val = split_rows(rows, 0.25, seed=0)
    held = {r["task_id"] for r in val}
    assert len(held) == 2 and not held & {r["task_id"] for r in train} and len(train) + len(val) == len(rows)
    assert split_rows(rows, 0.25, seed=0) == (train, val)
    with pytest.raises(ProasError, match="leave none to train on"):
        split_rows(rows[:1], 0.5, seed=0)


def test_sft_rows_lowers_the_loss_and_saves_the_best_epoch_whole(tiny_model, rows_file, tmp_path, capsys):
    from transformers import AutoModelForCausalLM

    out = tmp_path / "sft"
    assert proas_main(["lm", "sft-rows", "--data", str(rows_file), "--init-from", str(tiny_model), "--out", str(out),
                       "--epochs", "20", "--lr", "3e-3", "--batch-size", "4", "--val-fraction", "0.25",
                       "--check-rows", "8", "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    assert "held out by task" in printed and "generation check on 8 held-out rows" in printed
    record = json.loads((out / RECORD).read_text())
    losses = [e["val_loss"] for e in record["epochs"]]
    assert len(losses) == 21 and record["best_epoch"] == min(range(21), key=losses.__getitem__) > 0
    assert min(losses) < 0.6 * losses[0], losses  # measured: 6.4 -> 3.3 (held-out tasks' actions)
    # the directory loads as a model with its tokenizer, and holds the best epoch's weights
    tok = load_tokenizer(out)
    assert tok.chat_template == load_tokenizer(tiny_model).chat_template
    start = AutoModelForCausalLM.from_pretrained(str(tiny_model), use_safetensors=True)
    saved = AutoModelForCausalLM.from_pretrained(str(out), use_safetensors=True)
    rows = read_rows(rows_file)
    train, val = split_rows(rows, 0.25, seed=0)
    opts = RowsSFTOptions()
    enc_val = [encode_row(tok, r, opts)[:2] for r in val]
    enc_train = [encode_row(tok, r, opts)[:2] for r in train]
    cpu = torch.device("cpu")
    assert mean_nll(saved, enc_val, tok.pad_token_id, 8, cpu) == pytest.approx(min(losses), rel=1e-4)
    # measured: 6.4 -> about 0.6 on the training rows
    assert mean_nll(saved, enc_train, tok.pad_token_id, 8, cpu) < 0.2 * mean_nll(start, enc_train, tok.pad_token_id,
                                                                                   8, cpu)
    # the result answers in the format on tasks it never saw (measured: 8 of 8); the start does not
    check = record["generation_check"]
    assert check["rows"] == 8 and check["format"] >= 0.75, check
    assert check["examples"][0].startswith("<think>The next step towards the goal: ")
    before = check_generation(start, tok, val[:8], max_new_tokens=64, batch_size=8, device=cpu)
    assert before["format"] == 0.0, before


def test_bad_input_is_one_line_and_writes_nothing(tiny_model, rows_file, tmp_path, capsys):
    def run(data, out, *extra):
        code = proas_main(["lm", "sft-rows", "--data", str(data), "--init-from", str(tiny_model), "--out", str(out),
                           "--device", "cpu", *extra])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and err.startswith("proas: error: "), err
        return err

    assert "no such file" in run(tmp_path / "missing.jsonl", tmp_path / "o1")
    assert "give a .jsonl or .parquet" in run(tmp_path / "rows.csv", tmp_path / "o1")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(rows_file.read_text().splitlines()[0] + "\n{not json\n")
    assert "line 2 is not JSON" in run(bad, tmp_path / "o1")
    bad.write_text("[" * 100_000 + "]" * 100_000 + "\n")  # deeper than the parser goes
    assert "line 1 is not JSON (RecursionError)" in run(bad, tmp_path / "o1")
    bad.write_text('{"prompt": "p"}\n')
    assert "line 1 is not an object with the strings 'prompt' and 'response'" in run(bad, tmp_path / "o1")
    long = tmp_path / "long.jsonl"
    long.write_text(json.dumps({"prompt": "p", "response": "go to desk 1 " * 40, "task_id": "t"}) + "\n")
    assert "more than --max-response-length 64" in run(long, tmp_path / "o1", "--val-fraction", "0")
    used = tmp_path / "used"
    used.mkdir()
    (used / "keep").write_text("x")
    assert "exists and is not empty" in run(rows_file, used)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl", "long.jsonl", "used"]
    assert (used / "keep").read_text() == "x"


def test_an_action_quoted_only_in_the_history_is_not_admissible(rows):
    from proas.lm.sft_rows import _admissible_part

    # the third step of a task: its history quotes the second action, no longer admissible
    # (the object is in hand); the admissible list is the part after the last mention
    row = rows[2]
    taken = rows[1]["response"].split("<action>")[1].split("</action>")[0]
    assert f"'{taken}'" in row["prompt"] and f"'{taken}'" not in _admissible_part(row["prompt"])
    wanted = row["response"].split("<action>")[1].split("</action>")[0]
    assert f"'{wanted}'" in _admissible_part(row["prompt"])
