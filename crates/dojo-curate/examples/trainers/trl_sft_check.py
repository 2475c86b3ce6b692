"""Feed `dojo curate` exports to TRL's SFTTrainer, unchanged, for a few optimizer steps.

A manual check (TRL needs torch, too heavy for the test suite): it shows that the pre-tokenized
Parquet (`input_ids` + `assistant_masks`) and the OpenAI-shape messages JSONL (`messages` with
`tool_calls` arguments as objects, `tools`) are "readable by TRL's SFTTrainer as is". The model
is a tiny randomly initialised Llama with the target tokenizer's vocabulary (no model hub here).

    python trl_sft_check.py MODEL.gguf TOKENS.parquet MESSAGES.jsonl
"""

import os
import sys
import tempfile

import gguf
from datasets import load_dataset
from trl import SFTConfig, SFTTrainer

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../tests/py"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import tiny_llama  # noqa: E402
from hf_oracle import load  # noqa: E402  (the tokenizer from the GGUF, as the oracle test does)


def train(name, dataset, tok, **extra):
    with tempfile.TemporaryDirectory() as out:
        args = SFTConfig(
            output_dir=out,
            max_steps=2,
            per_device_train_batch_size=1,
            report_to=[],
            use_cpu=True,
            max_length=None,
            save_strategy="no",
            logging_steps=1,
            **extra,
        )
        trainer = SFTTrainer(model=tiny_llama(len(tok)), args=args, train_dataset=dataset, processing_class=tok)
        batch = next(iter(trainer.get_train_dataloader()))
        trained = int((batch["labels"] != -100).sum())
        total = int(batch["labels"].numel())
        result = trainer.train()
        print(f"{name}: {len(dataset)} rows, first batch {trained}/{total} tokens trained, loss {result.training_loss:.3f}")


def main():
    gguf_path, tokens_path, messages_path = sys.argv[1:4]
    tok = load(gguf_path)
    reader = gguf.GGUFReader(gguf_path)
    tok.chat_template = reader.fields["tokenizer.chat_template"].contents()
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token

    tokens = load_dataset("parquet", data_files=tokens_path, split="train")
    # Pre-tokenized: TRL sees `input_ids` and does not tokenize again, and takes our `labels`
    # (-100 outside the agent's own tokens) as they are. The whole file, metadata columns
    # included, goes in unchanged.
    expected = sum(1 for x in tokens[0]["labels"] if x != -100)
    print(f"tokens.parquet row 0: {expected} of {len(tokens[0]['input_ids'])} tokens have labels")
    train("tokens.parquet", tokens, tok)

    messages = load_dataset("json", data_files=messages_path, split="train")
    # Conversational: TRL renders `messages` (+ `tools`) with the tokenizer's chat template.
    train("messages.jsonl", messages.select_columns(["messages", "tools"]), tok)


main()
