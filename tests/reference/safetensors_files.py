"""Oracle: safetensors files written by the reference `safetensors` library, one per dtype,
plus a sharded checkpoint written by transformers-style sharding (index.json)."""
import json, os, sys
import torch
from safetensors.torch import save_file

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
base = torch.arange(24, dtype=torch.float64).reshape(2, 3, 4) - 11.5
tensors = {
    "f64": base.clone(), "f32": base.float(), "f16": base.half(), "bf16": base.bfloat16(),
    "i64": base.long(), "i32": base.int(), "i16": base.short(), "i8": base.to(torch.int8),
    "u8": (base + 12).to(torch.uint8), "bool": base > 0,
    "scalar": torch.tensor(3.25), "empty": torch.zeros(0, 5),
}
save_file(tensors, os.path.join(out, "all_dtypes.safetensors"), metadata={"format": "pt", "note": "oracle"})

shard_dir = os.path.join(out, "sharded")
os.makedirs(shard_dir, exist_ok=True)
shards = {"model-00001-of-00002.safetensors": {"a.weight": torch.ones(4, 4), "b.bias": torch.arange(3.0)},
          "model-00002-of-00002.safetensors": {"c.weight": torch.full((2, 2), 7.0, dtype=torch.bfloat16)}}
weight_map = {}
for name, ts in shards.items():
    save_file(ts, os.path.join(shard_dir, name), metadata={"format": "pt"})
    weight_map.update({k: name for k in ts})
with open(os.path.join(shard_dir, "model.safetensors.index.json"), "w") as f:
    json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)
