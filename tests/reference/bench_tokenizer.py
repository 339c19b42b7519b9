"""Reference side of the tokenizer benchmark: the `tokenizers` library encoding the same corpus
lines, repeated, one line at a time on one thread (RAYON_NUM_THREADS=1).
Usage: bench_tokenizer.py TOKENIZER_DIR CORPUS_FILE REPEATS -> one JSON line."""
import json, os, sys, time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
from tokenizers import Tokenizer

tok = Tokenizer.from_file(os.path.join(sys.argv[1], "tokenizer.json"))
with open(sys.argv[2], encoding="utf-8", errors="replace", newline="") as f:
    lines = f.read().split("\n")
if lines and lines[-1] == "":
    lines.pop()
repeats = int(sys.argv[3])
nbytes = sum(len(l.encode()) for l in lines)
for l in lines:
    tok.encode(l, add_special_tokens=False)
start = time.perf_counter()
for _ in range(repeats):
    for l in lines:
        tok.encode(l, add_special_tokens=False)
seconds = time.perf_counter() - start
print(json.dumps({"impl": "tokenizers", "bytes": nbytes * repeats, "seconds": seconds,
                  "mb_per_s": nbytes * repeats / seconds / 1e6}))
