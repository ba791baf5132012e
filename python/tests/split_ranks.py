"""One rank of test_distributed.py, run as `mpirun -n N python3 split_ranks.py OUT_DIR [axes]`: every rank makes the same
calls. A model split over the ranks with Model(comm=mpi_world()) (the mesh keys as config overrides) must give the
float64 reference's logits within the f32 whole-model bound (tests/support/tolerance.hpp), equal the same model in one
process within 1e-5 + 1e-5 |x| (the same f32 terms summed per rank, then across ranks: a few ulp of the largest
terms), and generate the same greedy tokens as one process. Each rank saves its logits to OUT_DIR/<case>.<rank>.npy,
which the test compares across ranks (every rank gets rank 0's logits: the same bits). Rank 0 prints "ok: ..." per
case; a failure raises, and mpirun exits non-zero. With "axes" (4 ranks), the one case is two axes in one mesh: Gemma 3's
layers on 2 pipeline stages, each split by heads over its 2 ranks."""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import F32_LOGITS, assert_close, fixture  # noqa: E402

import maxtext_cpp as mc  # noqa: E402

out_dir = sys.argv[1]
world = mc.mpi_world()
n = world.size
assert n > 1 and 0 <= world.rank < n, f"run under mpirun with 2 or more ranks, found {world}"


def case(name, config, split_config, weights, what=None):
    split = mc.Model(split_config, weights=weights, comm=world)
    one = mc.Model(config, weights=weights)
    tokens = np.load(fixture(name, "tokens.npy"))
    a = split.forward(tokens)
    assert_close(a, np.load(fixture(name, "logits.npy")), **F32_LOGITS, what=f"{name} over {n} ranks vs float64")
    assert_close(a, one.forward(tokens), rtol=1e-5, atol=1e-5, what=f"{name} over {n} ranks vs one process")
    np.save(os.path.join(out_dir, f"{what or name}.{world.rank}.npy"), a)
    prompt = [[int(t) for t in tokens[0][:4]]]
    g_split = list(split.generate(prompt, max_new_tokens=12)["tokens"][0])
    g_one = list(one.generate(prompt, max_new_tokens=12)["tokens"][0])
    assert g_split == g_one, (g_split, g_one)
    if world.rank == 0:
        print(f"ok: {name} over {n} ranks: logits within bounds, greedy tokens {g_split} as one process", flush=True)


if sys.argv[2:] == ["axes"]:
    assert n == 4, f"two axes: run under mpirun -n 4, found {world}"
    gemma3 = json.load(open(fixture("gemma3_model", "meta.json")))["config"]
    mesh = {**gemma3, "ici_tensor_parallelism": "2", "ici_pipeline_parallelism": "2"}
    case("gemma3_model", mc.Config(overrides=gemma3), mc.Config(overrides=mesh), fixture("gemma3_model", "model.safetensors"),
         what="gemma3_axes")
    sys.exit(0)

# Tensor parallelism: a Llama-2 of 4 query heads and 2 kv heads, split by heads and MLP columns.
llama = json.load(open(fixture("llama2_model", "meta.json")))["config"]
case("llama2_model", mc.Config(overrides=llama), mc.Config(overrides={**llama, "ici_tensor_parallelism": str(n)}),
     fixture("llama2_model", "model.safetensors"))
# Expert parallelism: Mixtral's experts split over the ranks (MaxText's layout).
yml = fixture("mixtral_model", "config.yml")
case("mixtral_model", mc.Config(yml), mc.Config(yml, overrides={"ici_expert_parallelism": str(n)}),
     fixture("mixtral_model", "model.safetensors"))
# Pipeline parallelism: Gemma 3's 7 layers (sliding and global, a tied head) dealt to the ranks as stages.
gemma3 = json.load(open(fixture("gemma3_model", "meta.json")))["config"]
case("gemma3_model", mc.Config(overrides=gemma3), mc.Config(overrides={**gemma3, "ici_pipeline_parallelism": str(n)}),
     fixture("gemma3_model", "model.safetensors"))
