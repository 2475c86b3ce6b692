#!/usr/bin/env python3
"""Greedy continuation of token ids with transformers, to compare a dojo-train checkpoint with
the embedded engine (`cargo run -p dojo-train --example greedy -- DIR IDS N`).

    python benchmarks/train_greedy_hf.py DIR 1,2,3 [N]
"""

import json
import sys

import torch
import transformers


def main():
    d, ids = sys.argv[1], [int(x) for x in sys.argv[2].split(",")]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    model = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
    tok = transformers.AutoTokenizer.from_pretrained(d)  # the tokenizer files load too
    x = torch.tensor([ids])
    out = []
    with torch.no_grad():
        for _ in range(n):
            nxt = int(model(input_ids=x).logits[0, -1].argmax())
            out.append(nxt)
            x = torch.cat([x, torch.tensor([[nxt]])], dim=1)
    print(json.dumps({"impl": "transformers", "generated": out, "text": tok.decode(out)}))


if __name__ == "__main__":
    main()
