"""Supervised fine-tuning of a Hugging Face causal LM on (prompt, response) rows: ``proas lm
sft-rows``, for the rows ``proas verl sft-data`` writes, whose prompts are the RL runs' own
(inside verl-agent, its templates).

Each row is tokenised as verl-agent's rollout shows it to the policy (the prompt as the single
user message of the tokenizer's chat template, with the generation prompt, tokenised alone) and
as verl's SFT dataset trains it (the response, then the end-of-turn token, so that generation
learns to stop); the loss is the mean negative log-likelihood of the response tokens only. Whole
tasks are held out for a validation loss, measured before training and after every epoch; the
epoch with the lowest one is saved. A generation check on held-out rows then says whether the
saved model writes answers in the format (``project_action``), with an action from the prompt's
admissible list, and the row's own action (docs/verl.md, section 10).
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F

from proas.errors import ProasError
from proas.fileio import atomic_dir, check_output_dir, open_regular
from proas.lm.prompt import project_action

__all__ = ["RowsSFTOptions", "check_generation", "encode_row", "read_rows", "response_nll", "split_rows",
           "train_on_rows"]

#: the record of a run, written beside the weights
RECORD = "proas_sft_rows.json"


@dataclass(frozen=True)
class RowsSFTOptions:
    epochs: int = 3
    lr: float = 1e-3
    batch_size: int = 32
    #: share of the tasks (all rows of a task together) held out for the validation loss
    val_fraction: float = 0.05
    #: share of the optimiser steps with a linear warmup; the rate then falls linearly to 0
    warmup: float = 0.05
    max_grad_norm: float = 1.0
    #: use only the first N rows of the file
    max_rows: int | None = None
    #: verl-agent's data.max_prompt_length and data.max_response_length of the RL run
    max_prompt_length: int = 2048
    max_response_length: int = 64
    #: held-out rows the generation check answers greedily (0: no check)
    check_rows: int = 64
    seed: int = 0
    device: str = "auto"


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a ``.jsonl`` (one JSON object a line) or ``.parquet`` file: each needs the
    strings ``prompt`` and ``response``; ``task_id``, when present, groups a task's rows for
    the validation split. Anything else is a one-line ``ProasError``."""
    path = Path(path)
    name = str(path)
    if not name.endswith((".jsonl", ".parquet")):
        raise ProasError(f"--data {name}: give a .jsonl or .parquet file of (prompt, response) rows")
    try:
        fh = open_regular(path, follow_symlinks=True)
    except FileNotFoundError:
        raise ProasError(f"--data {name}: no such file") from None
    with fh:
        data = fh.read()
    if name.endswith(".parquet"):
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise ProasError("reading parquet needs pyarrow (installed with verl); or give a .jsonl file") from None
        try:
            records = pq.read_table(pa.BufferReader(data)).to_pylist()
        except Exception as exc:  # noqa: BLE001 - pyarrow raises many types for a damaged file
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise ProasError(f"--data {name}: not a readable parquet file ({first})") from None
        where = [f"row {i + 1}" for i in range(len(records))]
    else:
        records, where = [], []
        for n, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ProasError(f"--data {name}: line {n} is not JSON ({exc.msg})") from None
            except (ValueError, RecursionError) as exc:  # too many digits, too deep (as tasksets' reader)
                raise ProasError(f"--data {name}: line {n} is not JSON ({exc.__class__.__name__})") from None
            where.append(f"line {n}")
    rows = []
    for rec, at in zip(records, where):
        if not isinstance(rec, dict) or not isinstance(rec.get("prompt"), str) \
                or not isinstance(rec.get("response"), str):
            raise ProasError(f"--data {name}: {at} is not an object with the strings 'prompt' and 'response'")
        tid = rec.get("task_id")
        rows.append({"prompt": rec["prompt"], "response": rec["response"],
                     "task_id": None if tid is None else str(tid)})
    if not rows:
        raise ProasError(f"--data {name}: holds no rows")
    return rows


def split_rows(rows: Sequence[dict[str, Any]], val_fraction: float,
               seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(train, validation): ``val_fraction`` of the tasks, drawn with ``seed``, and all their
    rows held out (a row without ``task_id`` is a task of its own), so no held-out step shares
    a task with a training step."""
    keys = [r["task_id"] if r["task_id"] is not None else f"\0row{i}" for i, r in enumerate(rows)]
    groups = sorted(set(keys))
    if val_fraction <= 0:
        return list(rows), []
    n_val = max(1, round(val_fraction * len(groups)))
    if n_val >= len(groups):
        raise ProasError(f"--val-fraction {val_fraction}: {len(groups)} task(s) leave none to train on")
    rng = random.Random(seed)
    rng.shuffle(groups)
    held = set(groups[:n_val])
    return ([r for r, k in zip(rows, keys) if k not in held], [r for r, k in zip(rows, keys) if k in held])


def prompt_ids(tokenizer, prompt: str) -> list[int]:
    """The token ids of ``prompt`` as verl-agent's rollout encodes it: the single user message of
    the chat template, with the generation prompt, tokenised alone."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                         tokenize=False)
    return tokenizer.encode(text, add_special_tokens=False)


def encode_row(tokenizer, row: dict[str, Any], opts: RowsSFTOptions) -> tuple[list[int], int, bool]:
    """``(ids, prompt length, prompt truncated)`` of a row: the prompt's ids (``prompt_ids``,
    cut on the left to ``max_prompt_length`` as ``data.truncation=left`` does) followed by the
    response's and the end-of-turn token's. A response longer than ``max_response_length`` is a
    ``ProasError``: the RL run could never generate it."""
    p = prompt_ids(tokenizer, row["prompt"])
    truncated = len(p) > opts.max_prompt_length
    if truncated:
        p = p[-opts.max_prompt_length:]
    r = tokenizer.encode(row["response"] + tokenizer.eos_token, add_special_tokens=False)
    if len(r) > opts.max_response_length:
        raise ProasError(f"a response is {len(r)} tokens with the end-of-turn token, more than "
                         f"--max-response-length {opts.max_response_length}: {row['response'][:80]!r}")
    return p + r, len(p), truncated


def collate(batch: Sequence[tuple[list[int], int]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded ``input_ids``, ``attention_mask`` and ``labels`` (-100 on the prompt and
    the padding: only response tokens are targets)."""
    width = max(len(ids) for ids, _ in batch)
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    for i, (ids, n_prompt) in enumerate(batch):
        t = torch.tensor(ids, dtype=torch.long)
        input_ids[i, : len(ids)] = t
        mask[i, : len(ids)] = 1
        labels[i, n_prompt: len(ids)] = t[n_prompt:]
    return {"input_ids": input_ids, "attention_mask": mask, "labels": labels}


def response_nll(model, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, int]:
    """(summed negative log-likelihood of the batch's target tokens, their number): token t is
    predicted from the tokens before it."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    targets = batch["labels"][:, 1:]
    nll = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), targets.reshape(-1),
                          ignore_index=-100, reduction="sum")
    return nll, int((targets != -100).sum())


def _batches(encoded: Sequence[tuple[list[int], int]], size: int, order: Sequence[int] | None = None):
    idx = list(range(len(encoded))) if order is None else list(order)
    for s in range(0, len(idx), size):
        yield [encoded[i] for i in idx[s: s + size]]


def _to(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device) for k, v in batch.items()}


def _autocast(device: torch.device):
    # bf16 forward passes on a GPU over fp32 weights, as verl and TRL train; fp32 on the CPU
    return torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")


@torch.no_grad()
def mean_nll(model, encoded: Sequence[tuple[list[int], int]], pad_id: int, batch_size: int,
             device: torch.device) -> float:
    """The mean response-token negative log-likelihood of ``encoded`` rows."""
    model.eval()
    total, count = 0.0, 0
    for batch in _batches(encoded, batch_size):
        with _autocast(device):
            nll, n = response_nll(model, _to(collate(batch, pad_id), device))
        total, count = total + float(nll), count + n
    return total / max(count, 1)


@torch.no_grad()
def check_generation(model, tokenizer, rows: Sequence[dict[str, Any]], *, max_new_tokens: int,
                     batch_size: int, device: torch.device, max_prompt_length: int = 2048) -> dict[str, Any]:
    """Greedy answers to ``rows``' prompts (left-padded, as verl-agent's HF rollout generates),
    projected as the RL runs project them (``project_action``): the shares of answers in the
    format (``<think>..</think>`` and a non-empty ``<action>..</action>``), of those whose action
    is in the prompt's admissible list (quoted there, as both templates list them; ``_admissible_part``) and of
    those whose action is the row's own, and the first answers."""
    model.eval()
    fmt = admissible = same = 0
    examples: list[str] = []
    for s in range(0, len(rows), batch_size):
        chunk = rows[s: s + batch_size]
        ids = [prompt_ids(tokenizer, r["prompt"])[-max_prompt_length:] for r in chunk]
        width = max(len(x) for x in ids)
        input_ids = torch.full((len(ids), width), tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(ids), width), dtype=torch.long)
        for i, x in enumerate(ids):
            input_ids[i, width - len(x):] = torch.tensor(x, dtype=torch.long)
            mask[i, width - len(x):] = 1
        with _autocast(device):
            out = model.generate(input_ids=input_ids.to(device), attention_mask=mask.to(device),
                                 max_new_tokens=max_new_tokens, do_sample=False,
                                 eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        for row, new in zip(chunk, out[:, width:].tolist()):
            text = tokenizer.decode(new, skip_special_tokens=True)
            action, malformed = project_action(text)
            wanted, _ = project_action(row["response"])
            fmt += not malformed
            admissible += (not malformed) and f"'{action}'" in _admissible_part(row["prompt"])
            same += (not malformed) and action == wanted
            if len(examples) < 3:
                examples.append(text)
    n = max(len(rows), 1)
    return {"rows": len(rows), "format": fmt / n, "admissible": admissible / n, "oracle_action": same / n,
            "examples": examples}


def _admissible_part(prompt: str) -> str:
    """The prompt from its last mention of the admissible actions on (verl-agent's "Your
    admissible actions of the current situation are: [...]", proas's "Admissible actions"), so
    that an action quoted only in the history does not count; the whole prompt when it has none."""
    at = prompt.lower().rfind("admissible actions")
    return prompt if at < 0 else prompt[at:]


def _device(spec: str) -> torch.device:
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if spec == "cuda" and not torch.cuda.is_available():
        raise ProasError("--device cuda: this machine has no CUDA GPU that torch can use (use cpu or auto)")
    if spec not in ("cpu", "cuda"):
        raise ProasError(f"--device {spec}: give auto, cpu or cuda")
    return torch.device(spec)


def train_on_rows(data: str | Path, model_dir: str | Path, out: str | Path, opts: RowsSFTOptions,
                  log: Callable[[str], None] = print) -> dict[str, Any]:
    """Fine-tune the model of ``model_dir`` on the rows of ``data`` (see the module docstring),
    write the best epoch's model with its tokenizer and the run's record (``RECORD``) to
    ``out``, whole or not at all, and return the record."""
    from transformers import AutoModelForCausalLM

    from proas.lm.model import check_weights_dir, load_tokenizer

    check_output_dir(out, "--out")
    device = _device(opts.device)
    rows = read_rows(data)
    if opts.max_rows is not None:
        rows = rows[: opts.max_rows]
    tokenizer = load_tokenizer(model_dir, "--init-from")
    if tokenizer.eos_token is None or tokenizer.pad_token_id is None:
        raise ProasError(f"--init-from {model_dir}: its tokenizer has no end-of-turn (eos) or padding token")
    check_weights_dir(model_dir, "--init-from")
    train_rows, val_rows = split_rows(rows, opts.val_fraction, opts.seed)
    encoded = {}
    truncated = 0
    for name, part in (("train", train_rows), ("val", val_rows)):
        encoded[name] = []
        for row in part:
            ids, n_prompt, cut = encode_row(tokenizer, row, opts)
            encoded[name].append((ids, n_prompt))
            truncated += cut
    # every row is checked before the weights load
    # safetensors only: a pickle's weights are never unpickled (check_weights_dir); nor is the
    # directory's own code (auto_map) run
    try:
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32, local_files_only=True,
                                                     use_safetensors=True, trust_remote_code=False)
    except Exception as exc:  # noqa: BLE001 - a damaged file ends in many types (SafetensorError, ...)
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        raise ProasError(f"--init-from {model_dir}: cannot load a local model "
                         f"({type(exc).__name__}: {first})") from None
    model.to(device)
    lengths = [(n, len(ids) - n) for ids, n in encoded["train"] + encoded["val"]]
    tokens = {"prompt_mean": sum(p for p, _ in lengths) / len(lengths), "prompt_max": max(p for p, _ in lengths),
              "response_mean": sum(r for _, r in lengths) / len(lengths), "response_max": max(r for _, r in lengths)}
    log(f"{len(rows)} rows ({len(train_rows)} train, {len(val_rows)} held out by task); prompt tokens mean "
        f"{tokens['prompt_mean']:.0f} max {tokens['prompt_max']}, response tokens mean {tokens['response_mean']:.1f} "
        f"max {tokens['response_max']}; {truncated} prompt(s) cut on the left; device {device}")

    torch.manual_seed(opts.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=opts.lr, weight_decay=0.0)
    per_epoch = math.ceil(len(encoded["train"]) / opts.batch_size)
    total = per_epoch * opts.epochs
    warm = max(1, round(opts.warmup * total))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warm, max(0.0, (total - s) / max(total - warm, 1))))
    pad = tokenizer.pad_token_id
    epochs: list[dict[str, Any]] = []
    val0 = mean_nll(model, encoded["val"], pad, opts.batch_size, device) if encoded["val"] else None
    epochs.append({"epoch": 0, "train_loss": None, "val_loss": val0, "seconds": 0.0})
    best_epoch, best_val, best_state = 0, val0, None
    if val0 is not None:
        log(f"epoch 0: val loss {val0:.4f}")
    gen = torch.Generator().manual_seed(opts.seed)
    for epoch in range(1, opts.epochs + 1):
        t0 = time.perf_counter()
        model.train()
        order = torch.randperm(len(encoded["train"]), generator=gen).tolist()
        total_nll, total_n = 0.0, 0
        for step, batch in enumerate(_batches(encoded["train"], opts.batch_size, order), 1):
            with _autocast(device):
                nll, n = response_nll(model, _to(collate(batch, pad), device))
            loss = nll / max(n, 1)
            if not torch.isfinite(loss):
                raise ProasError(f"epoch {epoch}, step {step}: the loss is {float(loss)}; lower --lr")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), opts.max_grad_norm)
            optimizer.step()
            schedule.step()
            total_nll, total_n = total_nll + float(nll.detach()), total_n + n
            if per_epoch >= 20 and step % (per_epoch // 10) == 0:
                log(f"  epoch {epoch} step {step}/{per_epoch}: train loss {total_nll / max(total_n, 1):.4f}")
        val = mean_nll(model, encoded["val"], pad, opts.batch_size, device) if encoded["val"] else None
        seconds = time.perf_counter() - t0
        epochs.append({"epoch": epoch, "train_loss": total_nll / max(total_n, 1), "val_loss": val,
                       "seconds": round(seconds, 2)})
        log(f"epoch {epoch}: train loss {epochs[-1]['train_loss']:.4f}"
            + (f", val loss {val:.4f}" if val is not None else "") + f", {seconds:.1f}s")
        if val is None or val < best_val:
            best_epoch, best_val = epoch, val
            best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
    if best_state is not None:
        model.load_state_dict(best_state)
    else:  # no epoch beat the start: the start is what is saved
        log("no epoch lowered the validation loss; the starting weights are saved")
    check = None
    if opts.check_rows and val_rows:
        pick = val_rows[:: max(1, len(val_rows) // opts.check_rows)][: opts.check_rows]
        check = check_generation(model, tokenizer, pick, max_new_tokens=opts.max_response_length,
                                 batch_size=opts.batch_size, device=device, max_prompt_length=opts.max_prompt_length)
        log(f"generation check on {check['rows']} held-out rows (greedy): format {check['format']:.1%}, "
            f"admissible action {check['admissible']:.1%}, the row's action {check['oracle_action']:.1%}")
        log(f"  first answer: {check['examples'][0]!r}")
    record = {"data": str(data), "model": str(model_dir), "rows": len(rows), "train_rows": len(train_rows),
              "val_rows": len(val_rows), "truncated_prompts": truncated, "tokens": tokens,
              "options": asdict(opts), "device": str(device), "epochs": epochs, "best_epoch": best_epoch,
              "generation_check": check}
    with atomic_dir(out, "--out") as tmp:  # the whole directory or nothing
        model.to("cpu").save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (Path(tmp) / RECORD).write_text(json.dumps(record, indent=1) + "\n")
    log(f"saved the epoch-{best_epoch} model -> {out}")
    return record
