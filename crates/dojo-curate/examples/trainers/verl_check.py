"""Feed `dojo curate` exports to verl's multi-turn SFT dataset, unchanged, and take two optimizer steps.

A manual check, like `trl_sft_check.py` (verl needs torch and Ray, too heavy for the test suite). It
loads `messages.parquet` with verl's own `MultiTurnSFTDataset`, built by verl's own
`create_sft_dataset` from verl's own `sft_trainer_engine.yaml` (composed with Hydra, so
`messages_key`, `tools_key`, `pad_mode: no_padding`, `truncation: error`,
`ignore_input_ids_mismatch: False` are verl's defaults; only `max_length` is raised to fit SWE
trajectories), and compares what verl would train on with our `tokens.parquet`, trajectory by
trajectory: same token ids? same loss positions? It does so for two chat templates on SmolLM2's
tokenizer:

* `native`: SmolLM2's own template (from the GGUF). It has no tool support: it ignores `tools` and
  `tool_calls` and writes observations as a `tool` role.
* `hermes`: Qwen2.5's template (`crates/dojo-tokenizer/tests/fixtures/qwen2_5.jinja`), which writes tools,
  calls and results exactly as our renderer writes them for SmolLM2 (`dojo-tokenizer` `messages.rs`), so
  verl's tokens can be compared with ours id for id.

Each template is tried on the export as written and, to find which column is at fault, on copies
with one repair at a time (the repairs live only in this script; the export is never changed):
`tools` parsed from JSON text to a list of objects; then also `null` members removed from
tool-call arguments and tool schemas (Parquet structs over the union of keys add them).

verl has no pre-tokenized SFT dataset, only the `data.custom_cls` hook; `DojoTokensDataset`
(`crates/dojo-curate/python/dojo_verl.py`) is such a class over `tokens.parquet`, checked here
against the same ids and masks. Last, a
tiny randomly initialised Llama with SmolLM2's vocabulary (no model hub here) takes two optimizer
steps on batches from verl's `SFTTensorCollator` with verl's `sft_loss`. verl's trainer itself
(`torchrun -m verl.trainer.sft_trainer`) is not run: its process group is `cpu:gloo,cuda:nccl`
(`verl/utils/distributed.py`), which needs a CUDA device.

verl pins transformers < 5.11, where `hf_oracle.py`'s GGUF tokenizer import does not exist, so the
tokenizer is first saved to a directory with the repo's tool venv (transformers 5.24 + gguf). Run
from the repository root, with EXPORT_DIR from `dojo curate --format parquet,messages`:

    uv venv -p python3.11 /tmp/verl-venv && VIRTUAL_ENV=/tmp/verl-venv uv pip install \
      "verl[verl-core]==0.9.1" torch==2.15.0 transformers==5.9.0 tensordict==0.10.0
    target/pytools/bin/python crates/dojo-curate/examples/trainers/verl_check.py \
      save-tokenizer ~/.cache/dojo/models/smollm2-*/SmolLM2-135M-Instruct.Q4_1.gguf TOK_DIR
    HF_HUB_OFFLINE=1 /tmp/verl-venv/bin/python crates/dojo-curate/examples/trainers/verl_check.py \
      TOK_DIR EXPORT_DIR
"""

import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import tiny_llama  # noqa: E402
HERMES_TEMPLATE = os.path.join(HERE, "../../../dojo-tokenizer/tests/fixtures/qwen2_5.jinja")
# The supported verl dataset class over tokens.parquet.
DOJO_VERL = os.path.abspath(os.path.join(HERE, "../../python/dojo_verl.py"))


def save_tokenizer(gguf_path, out_dir):
    """SmolLM2's tokenizer and chat template from the GGUF, as a Hugging Face tokenizer directory."""
    import gguf

    sys.path.insert(0, os.path.join(HERE, "../../tests/py"))
    from hf_oracle import load

    tok = load(gguf_path)
    fields = gguf.GGUFReader(gguf_path).fields
    # hf_oracle.load rebuilds SmolLM2's digit-splitting pre-tokenizer, which transformers' GGUF
    # converter drops.
    tok.chat_template = fields["tokenizer.chat_template"].contents()
    tok.save_pretrained(out_dir)
    print(f"saved {gguf_path} tokenizer ({len(tok)} tokens) to {out_dir}")


if len(sys.argv) == 4 and sys.argv[1] == "save-tokenizer":
    save_tokenizer(sys.argv[2], sys.argv[3])
    sys.exit(0)

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import Dataset  # noqa: E402


def verl_data_config(train_file, **overrides):
    """verl's SFT trainer config (`sft_trainer_engine.yaml`), composed as its Hydra entry point does."""
    import verl.trainer.config
    from hydra import compose, initialize_config_dir

    extra = [f"data.{k}={v}" for k, v in overrides.items()]
    with initialize_config_dir(config_dir=os.path.dirname(verl.trainer.config.__file__), version_base=None):
        cfg = compose("sft_trainer_engine", overrides=[f"data.train_files={train_file}", *extra])
    return cfg.data


def drop_nulls(v):
    if isinstance(v, dict):
        return {k: drop_nulls(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [drop_nulls(x) for x in v]
    return v


def repaired(messages_parquet, out):
    """A copy with `tools` as a list of objects (pyarrow makes it a list of union structs)."""
    rows = pq.read_table(messages_parquet).to_pylist()
    for r in rows:
        if isinstance(r["tools"], str):  # export schema 2 wrote JSON text
            r["tools"] = json.loads(r["tools"])
    pq.write_table(pa.Table.from_pylist(rows), out)
    return out


class NullFree:
    """Wraps a MultiTurnSFTDataset so messages and tools reach the template without null members.

    Parquet can only store the union struct, so a reader has to drop them; this is the one place the
    check changes what verl reads, to show what is left once they are gone.
    """

    def __init__(self, ds):
        ds.messages = [drop_nulls(m) for m in ds.messages]
        ds.tools = [drop_nulls(t) for t in ds.tools] if ds.tools is not None else None
        orig = ds._build_messages
        ds._build_messages = lambda example: drop_nulls(orig(example))
        self.ds = ds


def compare(ds, ours, tok):
    """verl's rows vs ours, matched by position (both files keep the curate order)."""
    res = {"rows": len(ds), "ok": 0, "errors": [], "same_ids": 0, "same_mask": 0, "verl_loss": 0, "our_loss": 0}
    extra_tokens = {}
    for i in range(len(ds)):
        try:
            item = ds[i]
        except Exception as e:  # the check this script exists for: record verl's reason
            res["errors"].append(f"row {i}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
            continue
        res["ok"] += 1
        ids, mask = item["input_ids"].tolist(), item["loss_mask"].tolist()
        o_ids, o_mask = ours[i]["input_ids"], ours[i]["assistant_masks"]
        res["verl_loss"] += sum(mask)
        res["our_loss"] += sum(o_mask)
        if ids == o_ids:
            res["same_ids"] += 1
            if mask == o_mask:
                res["same_mask"] += 1
            else:
                for t, (a, b) in enumerate(zip(mask, o_mask)):
                    if a != b:
                        key = (repr(tok.decode([ids[t]])), "verl" if a else "ours")
                        extra_tokens[key] = extra_tokens.get(key, 0) + 1
    res["mask_diffs"] = {f"{k[0]} only in {k[1]}": n for k, n in sorted(extra_tokens.items())}
    return res


def show_turn(ds, tok, row=0):
    """The first assistant turn with a tool call, decoded from verl's loss-masked tokens."""
    item = ds[row]
    ids, mask = item["input_ids"].tolist(), item["loss_mask"].tolist()
    turns, cur = [], []
    for t, m in zip(ids, mask):
        if m:
            cur.append(t)
        elif cur:
            turns.append(cur)
            cur = []
    if cur:
        turns.append(cur)
    return next(
        (tok.decode(t) for t in turns if "tool_call" in tok.decode(t) or "str_replace" in tok.decode(t)),
        tok.decode(turns[0]),
    )


def train_steps(name, ds, vocab, steps=2, batch_size=2):
    """Two AdamW steps with verl's collator (`no_padding` -> jagged nested tensors) and `sft_loss`."""
    from tensordict import TensorDict
    from verl.utils.dataset.dataset_utils import SFTTensorCollator
    from verl.workers.utils.losses import sft_loss

    model = tiny_llama(vocab)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    collate = SFTTensorCollator("no_padding")
    losses = []
    for step in range(steps):
        batch = collate([ds[(step * batch_size + j) % len(ds)] for j in range(batch_size)])
        seqs = batch["input_ids"].unbind()
        logps = []
        for s in seqs:
            logits = model(input_ids=s.unsqueeze(0)).logits[0].float()
            # log p(token t+1 | ..t) at position t, as verl's engines return it; the last is unused
            lp = torch.log_softmax(logits, dim=-1)[:-1].gather(-1, s[1:].unsqueeze(-1)).squeeze(-1)
            logps.append(torch.cat([lp, lp.new_zeros(1)]))
        log_probs = torch.nested.as_nested_tensor(logps, layout=torch.jagged)
        n_tokens = int(batch["loss_mask"].values().sum())
        data = TensorDict(
            {"loss_mask": batch["loss_mask"], "dp_size": torch.tensor(1), "batch_num_tokens": torch.tensor(n_tokens)},
            batch_size=[],
        )
        loss, _ = sft_loss(None, {"log_probs": log_probs}, data)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
        total = int(batch["input_ids"].offsets()[-1])
        print(f"  {name} step {step + 1}: {n_tokens}/{total} tokens trained, loss {loss.item():.3f}")
    return losses


def main():
    tok_dir, export = sys.argv[1:3]
    from verl.trainer.sft_trainer import create_sft_dataset
    from verl.utils import hf_tokenizer

    messages_parquet = os.path.join(export, "messages.parquet")
    tokens_parquet = os.path.join(export, "tokens.parquet")
    ours = pq.read_table(tokens_parquet).to_pylist()
    max_len = max(len(r["input_ids"]) for r in ours) + 4096  # tool schemas in the prompt add tokens

    tok = hf_tokenizer(tok_dir)
    native = tok.chat_template
    with open(HERMES_TEMPLATE) as f:
        hermes = f.read()

    results = {}
    hermes_ds = None
    with tempfile.TemporaryDirectory() as tmp:
        variants = {
            "as written": messages_parquet,
            "tools parsed": repaired(messages_parquet, os.path.join(tmp, "tools.parquet")),
            "tools parsed, nulls dropped": None,
        }
        for tname, template in (("native", native), ("hermes", hermes)):
            tok.chat_template = template
            for vname, path in variants.items():
                cfg = verl_data_config(path or variants["tools parsed"], max_length=max_len)
                try:
                    ds = create_sft_dataset([path or variants["tools parsed"]], cfg, tok, None, cfg.train_max_samples)
                except Exception as e:
                    results[(tname, vname)] = {"rows": 0, "ok": 0, "errors": [f"load: {type(e).__name__}: {e}"]}
                    continue
                if path is None:
                    ds = NullFree(ds).ds
                r = compare(ds, ours, tok)
                results[(tname, vname)] = r
                print(f"[{tname} / {vname}] {json.dumps(r)[:1500]}")
                if tname == "hermes" and path is None:
                    hermes_ds = ds
                if tname == "hermes" and r["ok"]:
                    print(f"  first tool-call turn verl trains on ({vname}):\n  {show_turn(ds, tok)!r}")

        tok.chat_template = native
        cfg = verl_data_config(tokens_parquet, max_length=max_len)
        cfg.custom_cls.path, cfg.custom_cls.name = DOJO_VERL, "DojoTokensDataset"
        tds = create_sft_dataset([tokens_parquet], cfg, tok, None, cfg.train_max_samples)
        same = sum(
            tds[i]["input_ids"].tolist() == ours[i]["input_ids"]
            and tds[i]["loss_mask"].tolist() == ours[i]["assistant_masks"]
            for i in range(len(tds))
        )
        print(f"[tokens.parquet via data.custom_cls] {type(tds).__name__}: {len(tds)} rows, {same} identical to ours")

        print("two optimizer steps, tiny random Llama, verl collator + sft_loss:")
        train_steps("tokens.parquet (custom_cls)", tds, len(tok))
        if hermes_ds is not None and results[("hermes", "tools parsed, nulls dropped")]["ok"] == len(hermes_ds):
            tok.chat_template = hermes
            train_steps("messages.parquet (MultiTurnSFTDataset, hermes, repaired)", hermes_ds, len(tok))

    unchanged_ok = all(results[(t, "as written")]["ok"] == len(ours) for t in ("native", "hermes"))
    print("verl reads messages.parquet unchanged:", "yes" if unchanged_ok else "NO")


if __name__ == "__main__":
    main()
