"""Hugging Face reference for dojo-curate's rendering and masks.

Reads JSON lines on stdin, each {"messages", "tools", "template"?, "marked_template"?}, and writes
one JSON line per input: the text `transformers`' `apply_chat_template` renders, its token ids,
and (when a `{% generation %}`-marked copy of the template is given) the `assistant_masks`
transformers computes with `return_assistant_tokens_mask=True`.

argv[1] is either a Hugging Face tokenizer directory (`tokenizer.json` + `tokenizer_config.json`),
loaded with `AutoTokenizer`, or a GGUF file, whose tokenizer is built by transformers' own GGUF
tokenizer converter (`convert_gguf_tokenizer`). The GGUF metadata is read with llama.cpp's `gguf`
package because transformers' own GGUF reader imports torch, which this oracle must not need.
"""

import json
import os
import sys

import gguf
from transformers import PreTrainedTokenizerFast
from transformers.integrations.gguf.gguf_tokenizer_mapping import (
    _SPECIAL_TOKENS,
    GGUF_TOKENIZER_MAPPING,
    convert_gguf_tokenizer,
)


def load(path):
    if os.path.isdir(path):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(path)
    reader = gguf.GGUFReader(path)
    meta = {k: f.contents() for k, f in reader.fields.items() if k.startswith("tokenizer.") or k == "general.architecture"}
    grouped = {
        group: {name: meta[f"tokenizer.{key}"] for key, name in renames.items() if f"tokenizer.{key}" in meta}
        for group, renames in GGUF_TOKENIZER_MAPPING.items()
    }
    tok_dict, tok_config = grouped["tokenizer"], grouped["tokenizer_config"]
    for name, key in _SPECIAL_TOKENS.items():
        token_id = meta.get(f"tokenizer.ggml.{key}")
        tok_config[name] = tok_dict["tokens"][token_id] if token_id is not None else None
    backend, _ = convert_gguf_tokenizer(meta["general.architecture"], tok_dict)
    if meta.get("tokenizer.ggml.pre") == "smollm":
        # The converter ignores the pre-tokenizer name and uses ByteLevel alone; SmolLM2's own
        # tokenizer.json splits digits first ("\n    35": `ĊĠĠĠĠ 3 5`, not `ĊĠĠĠ Ġ 3 5`).
        from tokenizers import pre_tokenizers as pt

        backend.pre_tokenizer = pt.Sequence(
            [pt.Digits(individual_digits=True), pt.ByteLevel(add_prefix_space=False, use_regex=True)]
        )
    return PreTrainedTokenizerFast(tokenizer_object=backend, **tok_config)


def main():
    tok = load(sys.argv[1])
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        kw = {"tools": req.get("tools") or None}
        text = tok.apply_chat_template(req["messages"], tokenize=False, chat_template=req.get("template"), **kw)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        out = {"text": text, "input_ids": ids}
        if req.get("marked_template"):
            enc = tok.apply_chat_template(
                req["messages"],
                chat_template=req["marked_template"],
                tokenize=True,
                return_dict=True,
                return_assistant_tokens_mask=True,
                **kw,
            )
            out["marked_text"] = tok.apply_chat_template(
                req["messages"], tokenize=False, chat_template=req["marked_template"], **kw
            )
            out["marked_input_ids"] = list(enc["input_ids"])
            out["assistant_masks"] = list(enc["assistant_masks"])
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
