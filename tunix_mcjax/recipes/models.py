# Copyright 2026 The tunix_mcjax Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     https://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""Models and tokenizers for the GRPO example: a tiny Qwen3 and real ones.

* `tiny_qwen3_config` / `create_tiny_model` / `ToyTokenizer`: a randomly
  initialised Qwen3-architecture model small enough to run GRPO on CPU, with a
  character-level tokenizer that Tunix's `TokenizerAdapter` accepts.
* `load_hf_qwen3` / `load_hf_qwen3_tokenizer`: a local Hugging Face Qwen3
  checkpoint through Tunix's own safetensors loader. Nothing is ever fetched
  from a hub.

Both creation paths produce globally sharded models when given a mesh that
spans several processes, with identical values on every process.
"""

from __future__ import annotations

from collections.abc import Iterable
import dataclasses
import functools
import json
import os
import pathlib
import struct
import threading
from typing import Any

from absl import logging
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
from tunix.models.qwen3 import model as qwen3_lib

from tunix_mcjax.engines import qwen3_hf

# Tunix 0.1.7 hardcodes RoPE theta = 1e6 in `apply_rope` and ignores
# `ModelConfig.rope_theta`, so a checkpoint trained with another theta would
# load "fine" and produce wrong logits.
TUNIX_QWEN3_ROPE_THETA = qwen3_hf.TUNIX_QWEN3_ROPE_THETA

# Special ids. bos must be non-zero: Tunix's Sampler only prepends bos when
# `bos_id()` is truthy.
PAD_ID = 0
BOS_ID = 1
EOS_ID = 2
UNK_ID = 3
_NUM_SPECIAL = 4

# The toy task's alphabet (see tasks.py). 4 specials + 12 characters = 16 ids,
# which divides any tp size up to 16 (the embedding is sharded over "tp").
TOY_ALPHABET = "abcdefghijk:"
# Every printable ASCII character plus newline: lets the tiny model read
# GSM8K-style prompts (it will not solve them; this is for plumbing tests).
PRINTABLE_ALPHABET = "\n" + "".join(chr(c) for c in range(32, 127))

_UNK_TEXT = "\N{REPLACEMENT CHARACTER}"


class ToyTokenizer:
  """Deterministic character-level tokenizer with pad/bos/eos/unk specials.

  Ids: pad=0, bos=1, eos=2, unk=3, then one id per alphabet character in
  alphabet order. `encode` never adds specials unless asked: Tunix's Sampler
  prepends bos itself and stops on eos. `decode` stops at the first eos and
  drops pad and bos, so decoding a padded or over-generated buffer yields just
  the text. Characters outside the alphabet encode to unk and ids outside the
  vocabulary decode to U+FFFD, so sampling from a model whose vocab was padded
  past `vocab_size` cannot crash decoding.
  """

  def __init__(self, alphabet: str = TOY_ALPHABET):
    if not alphabet:
      raise ValueError("ToyTokenizer needs a non-empty alphabet string.")
    if len(set(alphabet)) != len(alphabet):
      dupes = sorted({c for c in alphabet if alphabet.count(c) > 1})
      raise ValueError(
          f"ToyTokenizer alphabet has duplicate characters {dupes!r}; list"
          " each character once."
      )
    self._alphabet = alphabet
    self._char_to_id = {c: i + _NUM_SPECIAL for i, c in enumerate(alphabet)}
    self._id_to_char = {i: c for c, i in self._char_to_id.items()}

  @property
  def alphabet(self) -> str:
    return self._alphabet

  @property
  def vocab_size(self) -> int:
    return _NUM_SPECIAL + len(self._alphabet)

  def __len__(self) -> int:
    return self.vocab_size

  def bos_id(self) -> int:
    return BOS_ID

  def eos_id(self) -> int:
    return EOS_ID

  def pad_id(self) -> int:
    return PAD_ID

  def unk_id(self) -> int:
    return UNK_ID

  def encode(
      self, text: str, *, add_bos: bool = False, add_eos: bool = False
  ) -> list[int]:
    """Encodes `text` to ids, one per character."""
    ids = [self._char_to_id.get(c, UNK_ID) for c in str(text)]
    if add_bos:
      ids.insert(0, BOS_ID)
    if add_eos:
      ids.append(EOS_ID)
    return ids

  def decode(self, ids: Iterable[int] | np.ndarray | jax.Array) -> str:
    """Decodes ids up to the first eos, skipping pad and bos."""
    if isinstance(ids, (np.ndarray, jax.Array)):
      ids = np.asarray(ids).reshape(-1).tolist()
    chars = []
    for i in ids:
      i = int(i)
      if i == EOS_ID:
        break
      if i in (PAD_ID, BOS_ID):
        continue
      chars.append(self._id_to_char.get(i, _UNK_TEXT))
    return "".join(chars)

  def __repr__(self) -> str:
    return f"ToyTokenizer(alphabet={self._alphabet!r})"


def tiny_qwen3_config(**overrides: Any) -> qwen3_lib.ModelConfig:
  """A tiny Qwen3-architecture config for CPU GRPO runs and tests.

  Defaults: 2 layers, embed 64, MLP hidden 128, 4 query heads x 16, 2 KV heads
  (GQA), tied embeddings, vocab = `ToyTokenizer().vocab_size`, float32, and
  Tunix's default training sharding (axes "fsdp", "tp"). The widths divide a
  4-way fsdp axis and a tp axis of up to 2 (the KV-head count).

  Args:
    **overrides: Any `tunix.models.qwen3.model.ModelConfig` field.

  Returns:
    The config.

  Raises:
    ValueError: On an unknown field or inconsistent head counts.
  """
  fields = {f.name for f in dataclasses.fields(qwen3_lib.ModelConfig)}
  unknown = sorted(set(overrides) - fields)
  if unknown:
    raise ValueError(
        f"tiny_qwen3_config got unknown fields {unknown}; valid fields are"
        f" {sorted(fields)}."
    )
  kwargs: dict[str, Any] = dict(
      num_layers=2,
      vocab_size=ToyTokenizer().vocab_size,
      embed_dim=64,
      hidden_dim=128,
      num_heads=4,
      head_dim=16,
      num_kv_heads=2,
      rope_theta=TUNIX_QWEN3_ROPE_THETA,
      norm_eps=1e-6,
      use_tied_embedding=True,
      shd_config=qwen3_lib.ShardingConfig.get_default_sharding(),
      dtype=jnp.float32,
      param_dtype=jnp.float32,
  )
  kwargs.update(overrides)
  if kwargs["num_heads"] % kwargs["num_kv_heads"]:
    raise ValueError(
        f"num_heads={kwargs['num_heads']} must be a multiple of"
        f" num_kv_heads={kwargs['num_kv_heads']} (grouped-query attention)."
    )
  return qwen3_lib.ModelConfig(**kwargs)


def _init_tiny_state(
    config: qwen3_lib.ModelConfig, seed: jax.Array
) -> nnx.State:
  """Builds a tiny Qwen3 and returns its state (traced inside jit)."""
  # A traced seed must become a key first (Rngs reads arrays as key data);
  # for seeds < 2**32 this is the same key that Rngs(int) would make.
  root = jax.random.key(seed)
  model = qwen3_lib.Qwen3(config, rngs=nnx.Rngs(root))
  # Tunix zero-initialises every MLP kernel (it expects to load checkpoints).
  # From all-zero gate/up/down the MLP's gradients are exactly zero, so a
  # randomly initialised model would never train its MLPs at all.
  key = jax.random.fold_in(root, 0x4D4C50)  # "MLP"
  init = nnx.initializers.lecun_normal()
  for i, layer in enumerate(model.layers):
    mlp = layer.mlp
    if not isinstance(mlp, qwen3_lib.MLP):
      continue  # MoE experts have their own (non-zero) initialisation.
    for j, proj in enumerate((mlp.gate_proj, mlp.up_proj, mlp.down_proj)):
      k = jax.random.fold_in(jax.random.fold_in(key, i), j)
      kernel = proj.kernel
      kernel.set_value(init(k, kernel.shape, kernel.dtype))
  return nnx.state(model)


# Compiling the initialiser takes seconds on CPU and a job builds the same
# architecture several times (actor, reference, rollout copies): keep one
# compiled initialiser per (config, mesh), with the seed as a runtime input.
# ModelConfig is an unhashable dataclass, so its repr (all fields) is the key.
_INIT_CACHE: dict[tuple[str, jax.sharding.Mesh | None], Any] = {}
_INIT_CACHE_LOCK = threading.Lock()


def _compiled_init(
    config: qwen3_lib.ModelConfig, mesh: jax.sharding.Mesh | None
) -> tuple[nnx.GraphDef, Any]:
  key = (repr(config), mesh)
  with _INIT_CACHE_LOCK:
    if key not in _INIT_CACHE:
      abstract = nnx.eval_shape(
          lambda: qwen3_lib.Qwen3(config, rngs=nnx.Rngs(0))
      )
      graphdef, abstract_state = nnx.split(abstract)
      out_shardings = (
          None if mesh is None
          else nnx.get_named_sharding(abstract_state, mesh)
      )
      init = jax.jit(
          functools.partial(_init_tiny_state, config),
          out_shardings=out_shardings,
      )
      _INIT_CACHE[key] = (graphdef, init)
    return _INIT_CACHE[key]


def create_tiny_model(
    config: qwen3_lib.ModelConfig,
    *,
    seed: int,
    mesh: jax.sharding.Mesh | None = None,
) -> qwen3_lib.Qwen3:
  """Creates a randomly initialised Qwen3, sharded on `mesh` if given.

  Initialisation runs as one jitted program whose outputs carry the model's
  NamedShardings, so on a mesh spanning several processes every process
  computes exactly its own shards of the same global values (no host
  round trip, no cross-process transfer). Values depend only on `seed` and
  `config`, not on the mesh.

  Args:
    config: Model config (e.g. from `tiny_qwen3_config`).
    seed: Initialisation seed in [0, 2**32).
    mesh: Optional mesh whose axis names include those in `config.shd_config`
      (Tunix default: "fsdp", "tp").

  Returns:
    The model.
  """
  if not 0 <= int(seed) < 2**32:
    raise ValueError(f"seed must be in [0, 2**32), got {seed}.")
  if mesh is not None:
    _check_mesh_axes(config, mesh)
  graphdef, init = _compiled_init(config, mesh)
  state = init(np.uint32(seed))
  return nnx.merge(graphdef, state)


def _check_mesh_axes(
    config: qwen3_lib.ModelConfig, mesh: jax.sharding.Mesh
) -> None:
  needed = set()
  for f in dataclasses.fields(config.shd_config):
    for axis in getattr(config.shd_config, f.name):
      if isinstance(axis, tuple):
        needed.update(a for a in axis if a)
      elif axis:
        needed.add(axis)
  missing = sorted(needed - set(mesh.axis_names))
  if missing:
    raise ValueError(
        f"Mesh axes {mesh.axis_names} lack {missing}, which the model's"
        " ShardingConfig uses; build the mesh with axis names"
        f" {sorted(needed)}."
    )
  # Tunix's Qwen3 is written for Auto axes: under Explicit axes (the default
  # of `jax.make_mesh` in jax >= 0.7) its embedding gather fails to trace.
  explicit = [
      name
      for name, kind in zip(mesh.axis_names, mesh.axis_types)
      if kind == jax.sharding.AxisType.Explicit
  ]
  if explicit:
    raise ValueError(
        f"Mesh axes {explicit} are Explicit; Tunix's Qwen3 needs Auto axes."
        " Build the mesh with jax.sharding.Mesh(devices, names) or"
        " jax.make_mesh(shape, names,"
        " axis_types=(jax.sharding.AxisType.Auto,) * len(names))."
    )


def _read_safetensors_header(path: pathlib.Path) -> dict[str, Any]:
  with open(path, "rb") as f:
    (header_len,) = struct.unpack("<Q", f.read(8))
    header = json.loads(f.read(header_len))
  header.pop("__metadata__", None)
  return header


def _rope_theta(hf: dict[str, Any]) -> float:
  # transformers >= 5 writes `rope_parameters`; older checkpoints `rope_theta`.
  params = hf.get("rope_parameters") or {}
  theta = params.get("rope_theta", hf.get("rope_theta"))
  return float(theta) if theta is not None else float(TUNIX_QWEN3_ROPE_THETA)


def qwen3_config_from_hf(
    hf: dict[str, Any],
    *,
    dtype: Any = jnp.float32,
    allow_rope_theta_mismatch: bool = False,
) -> qwen3_lib.ModelConfig:
  """Translates a Hugging Face Qwen3 `config.json` dict to a Tunix config.

  Args:
    hf: The parsed config.json.
    dtype: Parameter and compute dtype.
    allow_rope_theta_mismatch: Accept a checkpoint whose RoPE theta is not the
      1e6 that Tunix 0.1.7 hardcodes (its logits will then differ from HF).

  Returns:
    The Tunix config.

  Raises:
    ValueError: If the checkpoint uses features Tunix's Qwen3 cannot express.
  """
  model_type = hf.get("model_type")
  if model_type != "qwen3":
    raise ValueError(
        f"config.json has model_type={model_type!r}; load_hf_qwen3 supports"
        " dense 'qwen3' checkpoints only (Tunix's Qwen3 MoE path needs TPU"
        " Pallas kernels)."
    )
  if hf.get("attention_bias"):
    raise ValueError(
        "config.json sets attention_bias=true; Tunix's Qwen3 has no attention"
        " biases. Use a checkpoint without them."
    )
  rope_scaling = hf.get("rope_scaling") or {}
  rope_type = (hf.get("rope_parameters") or {}).get(
      "rope_type", rope_scaling.get("rope_type", rope_scaling.get("type"))
  )
  if rope_type not in (None, "default"):
    raise ValueError(
        f"config.json uses RoPE type {rope_type!r}; Tunix 0.1.7 Qwen3 only"
        " implements default RoPE. Remove the scaling from config.json if you"
        " accept the difference."
    )
  theta = _rope_theta(hf)
  if theta != TUNIX_QWEN3_ROPE_THETA:
    msg = (
        f"config.json has rope_theta={theta:g} but Tunix 0.1.7 Qwen3 always"
        f" uses {TUNIX_QWEN3_ROPE_THETA:g}; logits would differ from the"
        " checkpoint's."
    )
    if not allow_rope_theta_mismatch:
      raise ValueError(msg + " Pass allow_rope_theta_mismatch=True to load.")
    logging.warning(msg)
  num_heads = int(hf["num_attention_heads"])
  embed_dim = int(hf["hidden_size"])
  return qwen3_lib.ModelConfig(
      num_layers=int(hf["num_hidden_layers"]),
      vocab_size=int(hf["vocab_size"]),
      embed_dim=embed_dim,
      hidden_dim=int(hf["intermediate_size"]),
      num_heads=num_heads,
      head_dim=int(hf.get("head_dim") or embed_dim // num_heads),
      num_kv_heads=int(hf.get("num_key_value_heads") or num_heads),
      rope_theta=int(theta),
      norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
      use_tied_embedding=bool(hf.get("tie_word_embeddings", False)),
      shd_config=qwen3_lib.ShardingConfig.get_default_sharding(),
      dtype=dtype,
      param_dtype=dtype,
  )


def hf_qwen3_loader_mode(
    path: str | os.PathLike[str], config: qwen3_lib.ModelConfig
) -> str:
  """Checks a checkpoint's tensors; the mode of Tunix's loader that reads it.

  Args:
    path: The checkpoint directory (*.safetensors).
    config: The Tunix config the checkpoint must fill.

  Returns:
    "optimized" (one dtype) or "original" (mixed dtypes, one process): the
    `mode` of Tunix's `create_model_from_safe_tensors`.

  Raises:
    ValueError: A tensor the config needs is missing, or the files mix dtypes
      in a multi-process job.
  """
  root = pathlib.Path(path).expanduser()
  headers = {}
  for f in sorted(root.glob("*.safetensors")):
    headers.update(_read_safetensors_header(f))
  # Tunix's loader reports a missing tensor as an opaque pytree-structure
  # error (and leaks the file handles); name the missing tensors instead.
  missing = [t.hf_name for t in qwen3_hf.qwen3_hf_tensors(config)
             if t.hf_name not in headers]
  if missing:
    raise ValueError(
        f"{str(root)!r} lacks tensors {missing[:8]}"
        f"{' ...' if len(missing) > 8 else ''}; is it a dense Qwen3"
        " checkpoint with Hugging Face parameter names (with lm_head.weight"
        " when tie_word_embeddings is false)?"
    )
  # Tunix's fast loader memory-maps each file as ONE dtype (the first
  # tensor's), which silently garbles files mixing dtypes; its per-tensor
  # loader is correct there but puts every tensor on one local device first.
  dtypes = {v["dtype"] for v in headers.values()}
  mode = "optimized" if len(dtypes) == 1 else "original"
  if mode == "original" and jax.process_count() > 1:
    raise ValueError(
        f"{str(root)!r} mixes tensor dtypes {sorted(dtypes)}: Tunix's fast"
        " loader misreads such files and its per-tensor loader cannot place"
        " weights across processes. Re-save the checkpoint in one dtype."
    )
  return mode


def load_hf_qwen3(
    path: str | os.PathLike[str],
    *,
    mesh: jax.sharding.Mesh | None,
    dtype: Any = jnp.float32,
    allow_rope_theta_mismatch: bool = False,
) -> tuple[qwen3_lib.Qwen3, Any, qwen3_lib.ModelConfig]:
  """Loads a local Hugging Face Qwen3 checkpoint directory.

  The directory must hold config.json, *.safetensors and the tokenizer files.
  Weights go through Tunix's `create_model_from_safe_tensors`; the tokenizer
  through `transformers.AutoTokenizer` with `local_files_only=True`.
  HF_HUB_OFFLINE is set so that nothing can reach a hub.

  Args:
    path: The checkpoint directory.
    mesh: Optional mesh ("fsdp", "tp") to shard the weights on.
    dtype: Parameter and compute dtype (e.g. jnp.float32, jnp.bfloat16).
    allow_rope_theta_mismatch: See `qwen3_config_from_hf`.

  Returns:
    (model, tokenizer, config).

  Raises:
    FileNotFoundError: If the directory, config.json or weights are missing.
    ValueError: On an unsupported checkpoint.
  """
  _prepare_transformers()
  root = pathlib.Path(path).expanduser()
  if not root.is_dir():
    raise FileNotFoundError(
        f"Qwen3 checkpoint directory {str(root)!r} does not exist; pass a"
        " local directory with config.json, *.safetensors and tokenizer files"
        " (hub ids are not supported: nothing is downloaded)."
    )
  config_path = root / "config.json"
  if not config_path.is_file():
    raise FileNotFoundError(f"No config.json in {str(root)!r}.")
  weight_files = sorted(root.glob("*.safetensors"))
  if not weight_files:
    raise FileNotFoundError(
        f"No *.safetensors files in {str(root)!r}; convert .bin weights to"
        " safetensors first."
    )
  hf = json.loads(config_path.read_text())
  config = qwen3_config_from_hf(
      hf, dtype=dtype, allow_rope_theta_mismatch=allow_rope_theta_mismatch
  )
  if mesh is not None:
    _check_mesh_axes(config, mesh)
  elif jax.process_count() > 1:
    # Without a mesh Tunix places every tensor on jax.devices()[0], which in
    # a multi-process job belongs to process 0 and is unreachable elsewhere.
    mesh = jax.sharding.Mesh(
        np.array(jax.local_devices()[:1]).reshape(1, 1), ("fsdp", "tp")
    )

  mode = hf_qwen3_loader_mode(root, config)

  from tunix.models.qwen3 import params as qwen3_params  # pylint: disable=g-import-not-at-top

  model = qwen3_params.create_model_from_safe_tensors(
      str(root), config, mesh=mesh, dtype=dtype, mode=mode
  )
  return model, load_hf_qwen3_tokenizer(root), config


def _prepare_transformers() -> None:
  """Offline, and without transformers' import-time advisory that PyTorch is
  missing: these recipes load tokenizers and configs only, and under CI=true
  transformers prints that line twice, beside a one-line input error."""
  os.environ["HF_HUB_OFFLINE"] = "1"
  os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
  os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")


def load_hf_qwen3_tokenizer(path: str | os.PathLike[str]) -> Any:
  """The Hugging Face tokenizer saved in a local checkpoint directory.

  Args:
    path: The checkpoint directory (tokenizer.json / tokenizer_config.json).

  Returns:
    A `transformers` tokenizer; Tunix's TokenizerAdapter accepts it as is.

  Raises:
    FileNotFoundError: If the directory does not exist.
  """
  _prepare_transformers()
  root = pathlib.Path(path).expanduser()
  if not root.is_dir():
    raise FileNotFoundError(
        f"Tokenizer directory {str(root)!r} does not exist; pass a local"
        " checkpoint directory (nothing is downloaded)."
    )
  # Imported lazily: transformers is heavy and only this path needs it.
  import transformers  # pylint: disable=g-import-not-at-top

  try:
    return transformers.AutoTokenizer.from_pretrained(
        str(root), local_files_only=True
    )
  except (OSError, ValueError, KeyError, TypeError) as e:
    # A broken or partial tokenizer file fails deep inside transformers.
    from tunix_mcjax.recipes import validation  # pylint: disable=g-import-not-at-top

    raise validation.InputError(
        f"cannot load the tokenizer in {str(root)!r} ({type(e).__name__}:"
        f" {e}); save a working one there (tokenizer.save_pretrained)."
    ) from e
