"""Bad inputs raise maxtext_cpp.Error subclasses (also ValueError / OSError / NotImplementedError) whose message
names what was wrong."""
import numpy as np
import pytest

from conftest import fixture, meta, read_safetensors


def llama_cfg(mc, **over):
    return mc.Config(overrides={**meta("llama2_model")["config"], **over})


def llama(mc):
    return mc.Model(llama_cfg(mc), weights=fixture("llama2_model", "model.safetensors"))


def test_hierarchy(mc):
    assert issubclass(mc.ConfigError, mc.Error) and issubclass(mc.ConfigError, ValueError)
    assert issubclass(mc.ShapeError, ValueError) and issubclass(mc.ArgumentError, ValueError)
    assert issubclass(mc.IoError, OSError) and issubclass(mc.UnsupportedError, NotImplementedError)


def test_unknown_decoder_block(mc):
    cfg = llama_cfg(mc)
    cfg.decoder_block = "no_such_block"
    with pytest.raises(mc.Error, match="no_such_block"):
        mc.Model(cfg)


def test_unknown_weight_type(mc):
    with pytest.raises(mc.UnsupportedError, match="weight storage int4"):
        mc.Model(llama_cfg(mc), weight_type="int4")


def test_mesh_of_several_ranks_refused(mc):
    # ici_tensor_parallelism splits a model over MPI ranks (the maxtext program under mpirun); one process refuses it.
    with pytest.raises(mc.UnsupportedError, match="ici_\\*_parallelism keys multiply to 2.*mpirun"):
        mc.Model(llama_cfg(mc, ici_tensor_parallelism="2", ici_fsdp_parallelism="1"))
    with pytest.raises(mc.UnsupportedError, match="ici_fsdp_parallelism = 2: it splits training work"):
        mc.Model(llama_cfg(mc, ici_fsdp_parallelism="2"))


def test_unknown_config_value(mc):
    with pytest.raises(mc.ConfigError, match="dtype"):
        mc.Config(overrides={"dtype": "float8"})


def test_missing_files(mc, tmp_path):
    with pytest.raises(OSError, match="no_such.yml"):
        mc.Config(str(tmp_path / "no_such.yml"))
    with pytest.raises(mc.IoError, match="no such file"):
        mc.Model(llama_cfg(mc), weights=str(tmp_path / "absent.safetensors"))


def test_forward_without_parameters(mc):
    with pytest.raises(mc.ArgumentError, match="no parameters"):
        mc.Model(llama_cfg(mc)).forward([1, 2, 3])


def test_tokens_of_the_wrong_kind(mc):
    m = llama(mc)
    with pytest.raises(mc.ArgumentError, match="expected integers, found dtype float32"):
        m.forward(np.zeros((1, 3), np.float32))
    with pytest.raises(mc.ShapeError, match="expected \\[T\\] or \\[B, T\\], found 3 dimensions"):
        m.forward(np.zeros((1, 2, 3), np.int32))
    with pytest.raises(mc.ArgumentError, match="token id 64 at \\[0,1\\] is outside the vocabulary \\[0, 64\\)"):
        m.forward([[1, 64]])
    with pytest.raises(mc.ArgumentError, match="does not fit in int32"):
        m.forward(np.array([1, 2**40]))
    with pytest.raises(mc.ArgumentError, match="positions has shape \\[1,2\\], tokens are \\[1,3\\]"):
        m.forward([[1, 2, 3]], positions=[[0, 1]])


def test_missing_and_misshaped_parameters(mc):
    flat = read_safetensors(fixture("llama2_model", "model.safetensors"))
    missing = {k: v for k, v in flat.items() if k != "decoder.layers_1.mlp.wo.kernel"}
    with pytest.raises(mc.IoError, match="missing tensor decoder.layers_1.mlp.wo.kernel \\(expected \\[48,32\\]\\)"):
        mc.Model(llama_cfg(mc), weights=missing)
    bad = dict(flat, **{"decoder.decoder_norm.scale": np.zeros(31, np.float32)})
    with pytest.raises(mc.IoError, match="decoder.decoder_norm.scale: expected shape \\[32\\], found \\[31\\]"):
        mc.Model(llama_cfg(mc), weights=bad)
    extra = dict(flat, **{"decoder.surprise": np.zeros(2, np.float32)})
    with pytest.raises(mc.IoError, match="unexpected tensor decoder.surprise"):
        mc.Model(llama_cfg(mc), weights=extra)
    mc.Model(llama_cfg(mc), weights=extra, allow_unused=True)  # allowed when asked


def test_unsupported_array_dtype_and_non_arrays(mc):
    flat = read_safetensors(fixture("llama2_model", "model.safetensors"))
    with pytest.raises(mc.ArgumentError, match="token_embedder.embedding: dtype complex64 is not supported"):
        mc.Model(llama_cfg(mc), weights=dict(flat, **{"token_embedder.embedding": np.zeros((64, 32), np.complex64)}))
    with pytest.raises(mc.ArgumentError, match="expected a path or a dict of arrays, found int"):
        mc.Model(llama_cfg(mc), weights=3)


def test_layer_and_cache_misuse(mc):
    m = llama(mc)
    with pytest.raises(mc.ShapeError, match="expected \\[B, T, 32\\] \\(emb_dim\\), found f32 \\[1,3,5\\]"):
        m.run_layer(np.zeros((1, 3, 5), np.float32), 0)
    with pytest.raises(mc.ArgumentError, match="layer 7 outside \\[0, 2\\)"):
        m.run_layer(np.zeros((1, 3, 32), np.float32), 7)
    with pytest.raises(mc.ArgumentError, match="kind: expected decoder, moe"):
        m.run_layer(np.zeros((1, 3, 32), np.float32), weights=fixture("llama2_model", "model.safetensors"), kind="nope")
    other = llama(mc)
    with pytest.raises(mc.ArgumentError, match="cache was made by another model"):
        m.forward([[1, 2]], cache=other.new_cache(1, 8))
    c = m.new_cache(1, 4)
    m.forward([[1, 2, 3]], cache=c)
    with pytest.raises(mc.ArgumentError, match="exceed the cache capacity 4"):
        m.forward([[1, 2]], cache=c)


def test_generate_misuse(mc):
    m = llama(mc)
    with pytest.raises(mc.ArgumentError, match="text prompts need tokenizer="):
        m.generate("hello")
    with pytest.raises(mc.ArgumentError, match="stream= needs tokenizer="):
        m.generate([[1, 2]], stream=print)
    with pytest.raises(mc.ArgumentError, match="top_p must be in \\(0, 1\\]"):
        m.generate([[1, 2]], top_p=0.0)


def test_callback_exceptions_propagate(mc):
    m = llama(mc)

    def boom(row, token):
        raise KeyError("from the callback")

    with pytest.raises(KeyError, match="from the callback"):
        m.generate([[1, 2]], max_new_tokens=3, on_token=boom)


def test_config_keys_refused_by_name(mc):
    with pytest.raises(mc.ConfigError, match="unknown key 'rope_typ' \\(set in override\\); did you mean rope_type\\?"):
        mc.Config(overrides={"model_name": "llama2-7b", "rope_typ": "yarn"})
    with pytest.raises(mc.UnsupportedError, match="use_multimodal = TRUE"):
        mc.Config(overrides={"model_name": "llama2-7b", "use_multimodal": "TRUE"})
    with pytest.raises(mc.ConfigError, match="did you mean paged"):
        mc.Config(overrides={"model_name": "llama2-7b", "attention": "pagd"})
    # Keys that only matter for training or device layout load.
    cfg = mc.Config(overrides={"model_name": "llama2-7b", "learning_rate": "1e-4", "ici_fsdp_parallelism": "4"})
    assert cfg.decoder_block == "llama2"
