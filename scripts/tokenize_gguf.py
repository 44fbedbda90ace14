#!/usr/bin/env python3
"""Text to a model's token ids, for `mocbench eval --tokens` (issue #29), through Hugging Face's `tokenizers`
library -- not a hand-written BPE:
  MODEL.gguf      the model's own byte-level BPE (its vocabulary and merges from the GGUF's tokenizer.ggml.*
                  metadata, read by the gguf package); pre-tokenization as the model family declares it
                  (tokenizer.ggml.pre): "smollm" splits digits one by one before the byte-level split
  a HF folder     its tokenizer.json (Tokenizer.from_file), the end-of-text id from config.json's eos_token_id
Documents are separated by the end-of-text id. Writes the ids whitespace-separated.

usage: tokenize_gguf.py MODEL.gguf|HF_FOLDER OUT.txt TEXT_FILE... [--max-tokens N] [--no-eos]
       tokenize_gguf.py MODEL.gguf|HF_FOLDER --decode "ID ID ..."    (the ids' text on stdout)
  --no-eos: no end-of-text id after each file (a prompt to continue, `scripts/generate_text.sh`)
  (python: Debian's python3 with PYTHONPATH=.local/gguf-py/site:.local/tokenizers-py/site; scripts/setup_real_model.sh)
"""
import json
import os
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers


def strings(reader, key):
    f = reader.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def scalar(reader, key):
    import gguf
    f = reader.fields[key]
    v = f.parts[f.data[0]]
    return v.tobytes().decode() if f.types[0] == gguf.GGUFValueType.STRING else v[0].item()


def gguf_tokenizer(path):
    import gguf  # only for GGUF models (the gguf wheel: scripts/setup_gguf_py.sh)
    reader = gguf.GGUFReader(path)
    if scalar(reader, "tokenizer.ggml.model") != "gpt2":
        sys.exit("tokenize_gguf: only byte-level BPE (tokenizer.ggml.model = gpt2) tokenizers are built")
    tokens = strings(reader, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in strings(reader, "tokenizer.ggml.merges")]
    tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges))
    split = [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    if "tokenizer.ggml.pre" in reader.fields and scalar(reader, "tokenizer.ggml.pre") == "smollm":
        split.insert(0, pre_tokenizers.Digits(individual_digits=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence(split)
    tok.decoder = decoders.ByteLevel()
    eos = scalar(reader, "tokenizer.ggml.eos_token_id") if "tokenizer.ggml.eos_token_id" in reader.fields else None
    return tok, eos


def folder_tokenizer(path):
    tj = os.path.join(path, "tokenizer.json")
    if not os.path.exists(tj):
        sys.exit(f"tokenize_gguf: {path} has no tokenizer.json")
    eos = None
    cfg = os.path.join(path, "config.json")
    if os.path.exists(cfg):
        e = json.load(open(cfg)).get("eos_token_id")
        eos = e[0] if isinstance(e, list) and e else e
    return Tokenizer.from_file(tj), eos


def main():
    args = sys.argv[1:]
    limit = None
    if "--max-tokens" in args:
        i = args.index("--max-tokens")
        limit = int(args[i + 1])
        del args[i:i + 2]
    no_eos = "--no-eos" in args
    if no_eos:
        args.remove("--no-eos")
    if os.path.isdir(args[0]):
        tok, eos = folder_tokenizer(args[0])
    else:
        tok, eos = gguf_tokenizer(args[0])
    if len(args) == 3 and args[1] == "--decode":
        sys.stdout.write(tok.decode([int(x) for x in args[2].split()], skip_special_tokens=False))
        return
    if no_eos:
        eos = None
    ids = []
    for path in args[2:]:
        with open(path, encoding="utf-8", errors="replace") as f:
            ids += tok.encode(f.read()).ids
        if eos is not None:
            ids.append(eos)
        if limit and len(ids) >= limit:
            ids = ids[:limit]
            break
    with open(args[1], "w") as out:
        out.write(" ".join(map(str, ids)) + "\n")
    print(f"tokenize_gguf: {len(ids)} tokens written to {args[1]}", file=sys.stderr)


if __name__ == "__main__":
    main()
