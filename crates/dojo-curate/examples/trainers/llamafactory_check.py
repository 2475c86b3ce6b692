"""Feed `dojo curate`'s `sharegpt.jsonl` to LLaMA-Factory, unchanged, through its own data pipeline.

A manual check (LLaMA-Factory needs torch, too heavy for the test suite), in the style of
`trl_sft_check.py`. The file is registered in a `dataset_info.json` exactly as LLaMA-Factory's
`data/README.md` documents the sharegpt format with tools (`formatting: sharegpt`, columns
`messages: conversations`, `system`, `tools`; tags `from`/`value`, `human`/`gpt`/`function_call`/
`observation`, which are also LLaMA-Factory's defaults). Then:

1. LLaMA-Factory's own `get_dataset` (converter + template + supervised processor) tokenizes it with
   the target tokenizer (SmolLM2's, from the GGUF). The template is `qwen`: SmolLM2's own chat
   template cannot hold tools, so dojo renders tools, calls and results for it Hermes-style, as
   Qwen2.5 does, and LLaMA-Factory's `qwen` template is that format. The script prints the rows read,
   one decoded example, how many tokens carry loss, and compares each row with `tokens.parquet`
   (dojo's own tokens for the same trajectory).
2. A 2-step `stage: sft` run (`llamafactory.train.tuner.run_exp`) on CPU with a tiny random Llama
   that has SmolLM2's vocabulary, saved with the tokenizer to a local directory (no model hub).

When LLaMA-Factory cannot read the file, the script says where and why. Exits 0 only when the
file as written is read and trained.

    HF_HUB_OFFLINE=1 python llamafactory_check.py MODEL.gguf EXPORT_DIR
"""

import json
import os
import sys
import tempfile
import traceback

import gguf
import pyarrow.parquet as pq
from common import smollm2_pre_tokenizer, tiny_llama
from transformers import TrainerCallback

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../tests/py"))
try:
    from hf_oracle import load  # the tokenizer from the GGUF, as the oracle test does
except ImportError:
    # LLaMA-Factory 0.9.5 caps transformers at 5.6.0, whose GGUF converter lives elsewhere than
    # hf_oracle expects; transformers' own `gguf_file=` loader runs the same converter.
    from transformers import AutoTokenizer

    def load(path):
        # The same converter, without hf_oracle's repair of SmolLM2's pre-tokenizer.
        tok = AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
        return smollm2_pre_tokenizer(tok)

TEMPLATE = "qwen"


def target_tokenizer(gguf_path):
    """SmolLM2's tokenizer and chat template from the GGUF (no model hub), pre-tokenizer as shipped."""
    tok = load(gguf_path)
    fields = gguf.GGUFReader(gguf_path).fields
    tok.chat_template = fields["tokenizer.chat_template"].contents()
    # The GGUF's special-token ids, as hf_oracle sets them (transformers 5.15's `gguf_file=` loader
    # gives eos `<|im_start|>` for this file, whose eos_token_id is 2, `<|im_end|>`).
    for name in ("bos", "eos", "unknown", "padding"):
        key = f"tokenizer.ggml.{name}_token_id"
        if key in fields:
            attr = {"unknown": "unk_token", "padding": "pad_token"}.get(name, f"{name}_token")
            setattr(tok, attr, tok.convert_ids_to_tokens(int(fields[key].contents())))
    return tok


def model_dir(gguf_path, out):
    """The tiny Llama with the target vocabulary, plus the tokenizer, as a local HF directory."""
    tok = target_tokenizer(gguf_path)
    tiny_llama(len(tok)).save_pretrained(out)
    tok.save_pretrained(out)
    return tok


def dataset_dir(sharegpt_path, out):
    """`dataset_info.json` as LLaMA-Factory's data/README.md documents sharegpt with tools."""
    info = {
        "dojo": {
            "file_name": os.path.abspath(sharegpt_path),
            "formatting": "sharegpt",
            "columns": {"messages": "conversations", "system": "system", "tools": "tools"},
            "tags": {
                "role_tag": "from",
                "content_tag": "value",
                "user_tag": "human",
                "assistant_tag": "gpt",
                "observation_tag": "observation",
                "function_tag": "function_call",
            },
        }
    }
    with open(os.path.join(out, "dataset_info.json"), "w") as f:
        json.dump(info, f, indent=2)


def args(model, data, out, steps):
    return {
        "model_name_or_path": model,
        "trust_remote_code": False,
        "stage": "sft",
        "do_train": True,
        "finetuning_type": "full",
        "dataset": "dojo",
        "dataset_dir": data,
        "template": TEMPLATE,
        "cutoff_len": 32768,
        "overwrite_cache": True,
        "preprocessing_num_workers": 1,
        "output_dir": out,
        "overwrite_output_dir": True,
        "per_device_train_batch_size": 1,
        "gradient_accumulation_steps": 1,
        "max_steps": steps,
        "learning_rate": 1e-4,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "use_cpu": True,
        "bf16": False,
        "fp16": False,
    }


def check_dataset(run_args, tok_ref, tokens_path):
    """LLaMA-Factory's own data pipeline: rows, one decoded example, loss tokens, agreement with dojo's tokens."""
    from llamafactory.data import get_dataset, get_template_and_fix_tokenizer
    from llamafactory.hparams import get_train_args
    from llamafactory.model import load_tokenizer

    model_args, data_args, training_args, _, _ = get_train_args(dict(run_args))
    tokenizer_module = load_tokenizer(model_args)
    tokenizer = tokenizer_module["tokenizer"]
    template = get_template_and_fix_tokenizer(tokenizer, data_args)
    ds = get_dataset(template, model_args, data_args, training_args, stage="sft", **tokenizer_module)["train_dataset"]
    print(f"  LLaMA-Factory read {len(ds)} rows")
    row = ds[0]
    text = tokenizer.decode(row["input_ids"], clean_up_tokenization_spaces=False)
    i = text.find("<|im_start|>assistant")
    print("  row 0 decoded, first assistant turn and observation:\n" + _indent(text[i : i + 900]))
    trained = [t for t, l in zip(row["input_ids"], row["labels"]) if l != -100]
    print(f"  row 0: {len(trained)} of {len(row['input_ids'])} tokens carry loss")
    print("  row 0 trained text (first 400 chars): " + repr(tokenizer.decode(trained, clean_up_tokenization_spaces=False)[:400]))

    # Same trajectory, dojo's tokens: LLaMA-Factory's qwen template should give the same ids, up to
    # the end of the last assistant turn (sharegpt drops the submit's observation after it).
    ours = pq.read_table(tokens_path).to_pylist()
    same = sum(1 for a, b in zip(ours, ds) if a["input_ids"][: len(b["input_ids"])] == b["input_ids"])
    print(f"  input_ids a prefix of tokens.parquet's (same row): {same} of {len(ds)} rows")
    lf_trained = sum(sum(1 for l in r["labels"] if l != -100) for r in ds)
    dojo_trained = sum(r["n_trained"] for r in ours)
    turns = sum(r["num_turns"] for r in ours)
    print(f"  trained tokens, all rows: LLaMA-Factory {lf_trained}, tokens.parquet {dojo_trained}, assistant turns {turns}")
    # Where labels differ: LLaMA-Factory's function/assistant slot "{{content}}<|im_end|>\n" trains the
    # "\n" after <|im_end|> too; dojo leaves it to the environment (it is not generated).
    extra = {}
    for a, b in zip(ours, ds):
        for k, (x, y) in enumerate(zip(a["labels"], b["labels"])):
            if x != y:
                key = (tokenizer.decode([b["input_ids"][k]]), "dojo trains" if x != -100 else "LF trains")
                extra[key] = extra.get(key, 0) + 1
    print(f"  label differences (token, who trains it): {extra}")
    for a, b in zip(ours, ds):
        if a["input_ids"][: len(b["input_ids"])] != b["input_ids"]:
            _first_difference(tok_ref, a["input_ids"], b["input_ids"])
            break
    return len(ds)


def _first_difference(tok, ours, theirs):
    n = next((k for k, (x, y) in enumerate(zip(ours, theirs)) if x != y), min(len(ours), len(theirs)))
    print(f"  first differing token at {n} (lengths {len(ours)} vs {len(theirs)}):")
    print("    dojo:          " + repr(tok.decode(ours[max(0, n - 8) : n + 12], clean_up_tokenization_spaces=False)))
    print("    LLaMA-Factory: " + repr(tok.decode(theirs[max(0, n - 8) : n + 12], clean_up_tokenization_spaces=False)))


class FirstBatch(TrainerCallback):
    """Counts the loss tokens of the first batch and keeps the logged losses."""

    def __init__(self):
        self.first = None
        self.losses = []

    def on_train_begin(self, args, state, control, train_dataloader=None, **kwargs):
        batch = next(iter(train_dataloader))
        self.first = (int((batch["labels"] != -100).sum()), int(batch["labels"].numel()))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.losses.append(logs["loss"])


def train(run_args):
    from llamafactory.train.tuner import run_exp

    cb = FirstBatch()
    run_exp(dict(run_args), callbacks=[cb])
    trained, total = cb.first
    print(f"  stage sft, {len(cb.losses)} steps: first batch {trained}/{total} tokens trained, losses {cb.losses}")


def run(label, gguf_path, sharegpt_path, tokens_path, tok, model, work):
    print(f"== {label}")
    data = tempfile.mkdtemp(dir=work)
    dataset_dir(sharegpt_path, data)
    run_args = args(model, data, os.path.join(work, "out-" + os.path.basename(data)), 2)
    try:
        check_dataset(run_args, tok, tokens_path)
        train(run_args)
        print("  PASS")
        return True
    except Exception as e:  # noqa: BLE001  (a check script: show where it failed and go on)
        print(f"  FAIL: {type(e).__name__}: {e}")
        traceback.print_exc(limit=-4)
        return False


def _indent(s):
    return "\n".join("    | " + line for line in s.splitlines())


def main():
    gguf_path, export = sys.argv[1:3]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sharegpt = os.path.join(export, "sharegpt.jsonl")
    tokens = os.path.join(export, "tokens.parquet")
    with tempfile.TemporaryDirectory() as work:
        model = os.path.join(work, "tiny-llama")
        tok = model_dir(gguf_path, model)
        ok = run("sharegpt.jsonl as written", gguf_path, sharegpt, tokens, tok, model, work)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
