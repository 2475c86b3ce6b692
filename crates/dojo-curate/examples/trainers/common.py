"""Shared by the trainer checks in this folder: the tiny model they train and SmolLM2's
pre-tokenizer, which transformers' GGUF converter does not rebuild."""

from transformers import LlamaConfig, LlamaForCausalLM


def tiny_llama(vocab):
    """A tiny randomly initialised Llama with the target vocabulary (no model hub here): enough
    to run a trainer's optimizer steps on CPU."""
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=32768,
    )
    return LlamaForCausalLM(cfg)


def smollm2_pre_tokenizer(tok):
    """transformers' GGUF converter ignores `tokenizer.ggml.pre` ("smollm") and pre-tokenizes with
    ByteLevel alone; SmolLM2's own tokenizer.json (and dojo) split digits first. Without this,
    "\\n    35" becomes `ĊĠĠĠ Ġ 3 5` instead of SmolLM2's `ĊĠĠĠĠ 3 5`, and ids cannot be compared."""
    from tokenizers import pre_tokenizers

    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    )
    return tok
