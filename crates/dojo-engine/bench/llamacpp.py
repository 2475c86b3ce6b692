"""llama.cpp side of the engine benchmark (same GGUF, same prompt, same protocol as
examples/bench.rs `speed`): prefill 128 tokens, then 64 greedy decode steps; best of 3 after a
warm-up. Usage: python llamacpp.py GGUF THREADS"""
import json
import sys
import time

import llama_cpp
import numpy as np

PREFILL, DECODE, REPEATS = 128, 64, 3
path, threads = sys.argv[1], int(sys.argv[2])
prompt_text = open(__file__.rsplit("/", 1)[0] + "/prompt.txt", encoding="utf-8").read()
llm = llama_cpp.Llama(model_path=path, n_ctx=1024, n_batch=PREFILL, n_ubatch=PREFILL,
                      n_threads=threads, n_threads_batch=threads, verbose=False)
ids = llm.tokenize(prompt_text.encode(), add_bos=False, special=True)[:PREFILL]


def last_logits():
    # Only the last position's logits exist (logits_all=False, as in the Rust bench).
    ptr = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),))


best_p = best_d = float("inf")
for _ in range(REPEATS + 1):
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(ids)
    p = time.perf_counter() - t0
    gen = []
    t1 = time.perf_counter()
    for _ in range(DECODE):
        nxt = int(np.argmax(last_logits()))
        gen.append(nxt)
        llm.eval([nxt])
    d = time.perf_counter() - t1
    best_p, best_d = min(best_p, p), min(best_d, d)
print(json.dumps({"engine": f"llama.cpp (llama-cpp-python {llama_cpp.__version__})",
                  "threads": threads, "prefill_tokens": PREFILL,
                  "prefill_tok_s": PREFILL / best_p, "decode_tokens": DECODE,
                  "decode_tok_s": DECODE / best_d, "greedy_ids_head": gen[:8]}))
