"""Models split over MPI ranks from Python: Model(comm=mpi_world()) under mpirun (split_ranks.py runs on every rank;
docs/distributed.md). Skipped without mpirun or a module built with MPI. The refusals run in this process."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import fixture, meta

HERE = os.path.dirname(os.path.abspath(__file__))


def _mpi_env():
    env = dict(os.environ)
    # As root (CI), several ranks on 2 cores, over shared memory (docs/distributed.md).
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_btl="self,vader",
               OMPI_MCA_rmaps_base_oversubscribe="1", OMP_NUM_THREADS="1")
    return env


def _needs_mpi(mc):
    if shutil.which("mpirun") is None:
        pytest.skip("no mpirun (apt-get install openmpi-bin libopenmpi-dev)")
    try:
        mc.mpi_world()
    except mc.UnsupportedError as e:
        pytest.skip(str(e))


def test_split_models_equal_one_process_and_the_reference(mc, tmp_path):
    # mpi_world() in this (pytest) process is a world of one rank; the split runs in the ranks mpirun starts.
    _needs_mpi(mc)
    n = 2
    r = subprocess.run(["mpirun", "-n", str(n), sys.executable, os.path.join(HERE, "split_ranks.py"), str(tmp_path)],
                       env=_mpi_env(), capture_output=True, text=True, timeout=600)
    print(r.stdout)
    assert r.returncode == 0, f"mpirun exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    assert r.stdout.count("ok: ") == 3, r.stdout
    for name in ("llama2_model", "mixtral_model", "gemma3_model"):
        first = np.load(tmp_path / f"{name}.0.npy")
        for rank in range(1, n):
            other = np.load(tmp_path / f"{name}.{rank}.npy")
            assert np.array_equal(first.view(np.uint32), other.view(np.uint32)), f"{name}: rank {rank}'s logits differ"


def test_two_axes_in_one_mesh(mc, tmp_path):
    # 4 ranks: 2 pipeline stages of Gemma 3's 7 layers, each stage's heads split over its 2 ranks (sub-communicators).
    _needs_mpi(mc)
    r = subprocess.run(["mpirun", "-n", "4", sys.executable, os.path.join(HERE, "split_ranks.py"), str(tmp_path), "axes"],
                       env=_mpi_env(), capture_output=True, text=True, timeout=600)
    print(r.stdout)
    assert r.returncode == 0, f"mpirun exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    assert r.stdout.count("ok: ") == 1, r.stdout
    first = np.load(tmp_path / "gemma3_axes.0.npy")
    for rank in range(1, 4):
        assert np.array_equal(first.view(np.uint32), np.load(tmp_path / f"gemma3_axes.{rank}.npy").view(np.uint32))


def test_mesh_and_ranks_must_agree(mc):
    _needs_mpi(mc)
    world = mc.mpi_world()  # not under mpirun: one rank
    assert (world.rank, world.size) == (0, 1)
    assert "rank 0 of 1" in repr(world)
    over = {**meta("llama2_model")["config"], "ici_tensor_parallelism": "2"}
    with pytest.raises(mc.Error, match="multiply to 2.*mpirun -n 2"):
        mc.Model(mc.Config(overrides=over), comm=world)
    with pytest.raises(mc.UnsupportedError, match="comm=maxtext_cpp.mpi_world"):
        mc.Model(mc.Config(overrides=over))
    pipe = {**meta("llama2_model")["config"], "ici_pipeline_parallelism": "1"}
    m = mc.Model(mc.Config(overrides=pipe), weights=fixture("llama2_model", "model.safetensors"), comm=world)
    assert m.forward(np.load(fixture("llama2_model", "tokens.npy"))).shape[-1] == 64  # one rank: the whole model
