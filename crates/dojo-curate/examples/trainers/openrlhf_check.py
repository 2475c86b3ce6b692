"""Feed `dojo curate`'s `messages.jsonl` to OpenRLHF's SFT dataset, unchanged, and train on it.

A manual check (OpenRLHF needs torch, too heavy for the test suite), in the style of
`trl_sft_check.py`. It does what `openrlhf.cli.train_sft` does with
`--data.dataset messages.jsonl --data.input_key messages --data.apply_chat_template
[--data.multiturn]`: OpenRLHF's `blending_datasets` loads the file and `SFTDataset` renders each
row with the tokenizer's chat template (SmolLM2's, from the GGUF) and builds its loss mask. It
prints the rows kept and what the loss mask covers, compared with dojo's own labels in
`tokens.parquet` for the same trajectory.

OpenRLHF's `SFTTrainer.fit` drives a DeepSpeed engine (`strategy.backward`/`optimizer_step`,
`engine.global_steps`), and `DeepspeedStrategy.setup_distributed` calls `torch.cuda.set_device`
(openrlhf/utils/deepspeed/deepspeed.py:97 in 0.11.2), so `openrlhf.cli.train_sft` cannot run without
a GPU; its wheel also pins flash-attn==2.8.3, which needs CUDA to build. So openrlhf is installed
with `--no-deps` plus what its dataset and model modules import, and the training part stops short
of `SFTTrainer`: two optimizer steps of
plain `torch.optim.AdamW` on OpenRLHF's own `Actor` forward (log-probs) and `SFTLoss`, with the
shifted loss mask exactly as `SFTTrainer.fit` computes it. `openrlhf.models` imports flash-attn's
padding helpers at module level (used only for packed samples); without flash-attn a placeholder
module that raises if called stands in for it. The `strategy` passed to `SFTDataset`
and `blending_datasets` is a stand-in carrying only the CLI arguments they read.

For SmolLM2's template, which has no tool support, `dojo curate` writes the messages with the calls
in the text (`--messages-style auto`); OpenRLHF never passes `tools` to the template, so for other
models use `--messages-style inline`. Exits 0 when the export trains exactly what `tokens.parquet`
trains (ids a prefix, 17/17 on the bundled benchmark).

    HF_HUB_OFFLINE=1 python openrlhf_check.py MODEL.gguf EXPORT_DIR
"""

import os
import sys
from types import SimpleNamespace

import pyarrow.parquet as pq
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import tiny_llama  # noqa: E402
from llamafactory_check import target_tokenizer  # noqa: E402  (same tokenizer and model)


def _flash_attn_placeholder():
    """`openrlhf.models` imports flash-attn helpers at module level (ring_attn_utils.py) for packed
    samples and ring attention only; flash-attn needs CUDA to build. Without it, placeholder modules
    whose functions raise keep the import working; this check packs nothing, so none is called."""
    try:
        import flash_attn  # noqa: F401
    except ImportError:
        import types

        def missing(*_a, **_k):
            raise NotImplementedError("flash-attn is not installed (packing_samples needs it)")

        names = {
            "flash_attn.bert_padding": ("index_first_axis", "pad_input", "rearrange", "unpad_input"),
            "flash_attn.utils.distributed": ("all_gather",),
        }
        for mod in ("flash_attn", "flash_attn.utils", *names):
            m = sys.modules[mod] = types.ModuleType(mod)
            m.__path__ = []
            for name in names.get(mod, ()):
                setattr(m, name, missing)


_flash_attn_placeholder()
from openrlhf.datasets import SFTDataset  # noqa: E402
from openrlhf.datasets.utils import blending_datasets  # noqa: E402
from openrlhf.models import Actor, SFTLoss  # noqa: E402

MAX_LEN = 32768


def strategy(multiturn):
    """The part of OpenRLHF's strategy that `blending_datasets` and `SFTDataset` read: CLI args."""
    data = SimpleNamespace(
        input_key="messages",
        output_key=None,
        apply_chat_template=True,
        tokenizer_chat_template=None,
        multiturn=multiturn,
        max_len=MAX_LEN,
    )
    return SimpleNamespace(
        args=SimpleNamespace(data=data, use_ms=False), print=lambda *a: None, is_rank_0=lambda: True
    )


def coverage(name, ds, tok, ours):
    """What OpenRLHF's loss mask trains, against dojo's labels for the same rows."""
    print(f"{name}: {len(ds)} rows kept")
    ids, _, mask = ds[0]
    ids, mask = ids[0].tolist(), mask[0]
    # `SFTTrainer.fit` scores token k+1 with mask[k] (it shifts: loss_mask[:, :-1] against
    # log-probs of the rolled sequence), so the trained tokens are ids[k+1] where mask[k] == 1.
    trained = [ids[k + 1] for k in range(len(ids) - 1) if mask[k] == 1]
    text = tok.decode(trained, clean_up_tokenization_spaces=False)
    print(f"  row 0: {len(trained)} of {len(ids)} tokens trained; <tool_call> in trained text: {'<tool_call>' in text}")
    print(f"  row 0 trained text (first 300 chars): {text[:300]!r}")
    print(f"  row 0 trained text (last 120 chars): {text[-120:]!r}")
    ours_text = tok.decode([x for x in ours[0]["labels"] if x != -100], clean_up_tokenization_spaces=False)
    print(f"  tokens.parquet row 0 trains {ours[0]['n_trained']} tokens: {ours_text[:200]!r}")
    total = 0
    for i in range(len(ds)):
        _, _, m = ds[i]
        total += int(m[0, :-1].sum())
    print(f"  all rows: {total} tokens trained (tokens.parquet: {sum(r['n_trained'] for r in ours)})")
    tail = tok.decode(ids[-12:], clean_up_tokenization_spaces=False)
    print(f"  row 0 last tokens of the rendered sequence: {tail!r}")


def same_ids(ds, ours):
    """Rows whose OpenRLHF input_ids are a prefix of tokens.parquet's, ignoring the EOS id it forces last."""
    n = 0
    for i, r in enumerate(ours):
        ids = ds[i][0][0].tolist()[:-1]
        n += r["input_ids"][: len(ids)] == ids
    return n


def train_two_steps(name, ds, tok):
    torch.manual_seed(0)
    actor = Actor(tiny_llama(len(tok)))
    # Actor sets packing_samples only when it loads a checkpoint by name; given a model object
    # (as here, no hub) it keeps the model as is. The CLI's default is no packing.
    actor.packing_samples = False
    loss_fn = SFTLoss()
    opt = torch.optim.AdamW(actor.parameters(), lr=1e-4)
    loader = torch.utils.data.DataLoader(ds, batch_size=1, shuffle=False, collate_fn=ds.collate_fn)
    losses = []
    for step, (inputs, attention_masks, loss_masks) in enumerate(loader):
        if step == 2:
            break
        inputs, attention_mask, loss_mask = inputs.squeeze(1), attention_masks.squeeze(1), loss_masks.squeeze(1)
        if step == 0:
            print(f"  first batch: {int(loss_mask[:, :-1].sum())}/{inputs.numel()} tokens trained")
        # As SFTTrainer.fit: Actor log-probs of the rolled sequence, SFTLoss on the shifted mask.
        logps, _ = actor(inputs, attention_mask=attention_mask, return_output=True, return_logprobs=True)
        loss = loss_fn(logps, loss_mask[:, :-1])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(round(loss.item(), 4))
    print(f"  {name}: 2 AdamW steps on Actor + SFTLoss, losses {losses}")


def main():
    gguf_path, export = sys.argv[1:3]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    tok = target_tokenizer(gguf_path)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    ours = pq.read_table(os.path.join(export, "tokens.parquet")).to_pylist()
    path = os.path.join(export, "messages.jsonl")
    runs = [(path, True, "messages.jsonl"), (path, False, "messages.jsonl")]
    ok = True
    for file, multiturn, label in runs:
        s = strategy(multiturn)
        data = blending_datasets(file, None, s)
        name = f"{label}, --data.apply_chat_template{' --data.multiturn' if multiturn else ''}"
        ds = SFTDataset(data, tok, MAX_LEN, s, num_processors=1, multiturn=multiturn)
        coverage(name, ds, tok, ours)
        same = same_ids(ds, ours)
        print(f"  input_ids a prefix of tokens.parquet's (same row): {same} of {len(ds)} rows")
        train_two_steps(name, ds, tok)
        if file == path and multiturn:
            ok = same == len(ds) == len(ours)
    # Exit 0 only when the export as written trains what dojo's tokens.parquet trains.
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
