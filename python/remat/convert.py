"""remat.convert: a remat GPT-2 model file (llm.c's checkpoint format) to
PyTorch and Hugging Face forms:

    python3 -m remat.convert MODEL.bin OUT

writes the directory OUT with

- ``pytorch_model.bin``: a ``state_dict`` (``torch.save``) with Hugging
  Face's GPT-2 names and layouts (``GPT2LMHeadModel``): ``transformer.wte``,
  ``transformer.wpe``, ``transformer.h.N.{ln_1, attn.c_attn, attn.c_proj,
  ln_2, mlp.c_fc, mlp.c_proj}``, ``transformer.ln_f`` and ``lm_head.weight``,
  tied (the same tensor as ``transformer.wte.weight``). The four matrices
  of a block are Conv1D's, stored (in, out): the transpose of remat's
  (out, in);
- ``model.safetensors``: the same tensors in the safetensors format,
  written here by its specification (an 8-byte little-endian header length,
  a JSON header of dtype, shape and data_offsets per tensor, then the raw
  little-endian data); ``lm_head.weight`` is left out, as Hugging Face
  leaves out tied weights (a loader ties it again);
- ``config.json``: the GPT2Config fields of the shape.

remat pads the vocabulary (to a multiple of 128, as llm.c does); the rows
past the real vocabulary are never a target or an input, so the embedding
is cut to the real vocabulary (``vocab_size``). A bf16 file (version 5) is
widened to fp32 exactly. The file format (docs/architecture.md, and
src/io/format.c): a header of 256 little-endian int32 (magic 20240326,
version 3 for fp32 or 5 for bf16, maxT, V, L, NH, C, Vp), then every
parameter in the order of ``LLMC_ORDER``.
"""
import argparse
import collections
import json
import os
import struct
import sys

import torch

MAGIC = 20240326
VERSIONS = {3: ("fp32", 4), 5: ("bf16", 2)}
HEADER_BYTES = 256 * 4


class ConvertError(ValueError):
    """The model file cannot be read or the output cannot be written."""


def llmc_shapes(maxT, V, Vp, L, NH, C):
    """llm.c's parameter tensors in file order: (name, shape)."""
    return [("wte", (Vp, C)), ("wpe", (maxT, C)), ("ln1w", (L, C)), ("ln1b", (L, C)),
            ("qkvw", (L, 3 * C, C)), ("qkvb", (L, 3 * C)), ("attprojw", (L, C, C)),
            ("attprojb", (L, C)), ("ln2w", (L, C)), ("ln2b", (L, C)), ("fcw", (L, 4 * C, C)),
            ("fcb", (L, 4 * C)), ("fcprojw", (L, C, 4 * C)), ("fcprojb", (L, C)),
            ("lnfw", (C,)), ("lnfb", (C,))]


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def read_model(path):
    """(config, tensors): the header's shape as a dict (maxT, V, Vp, L, NH,
    C, version, precision) and llm.c's tensors by name, as fp32 torch
    tensors. Raises ConvertError naming what is wrong with the file."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ConvertError(f"cannot read model file '{path}': {e.strerror or e}") from e
    if len(data) < HEADER_BYTES:
        raise ConvertError(f"'{path}' is not a remat (llm.c GPT-2) model file: {len(data)} bytes, "
                           f"shorter than the {HEADER_BYTES}-byte header")
    hdr = struct.unpack("<256i", data[:HEADER_BYTES])
    if hdr[0] != MAGIC:
        raise ConvertError(f"'{path}' is not a remat (llm.c GPT-2) model file: magic number is "
                           f"{hdr[0]}, expected {MAGIC}")
    if hdr[1] not in VERSIONS:
        raise ConvertError(f"model file '{path}' has version {hdr[1]}; remat.convert reads "
                           f"version 3 (fp32) and 5 (bf16)")
    maxT, V, L, NH, C, Vp = hdr[2:8]
    cfg = {"maxT": maxT, "V": V, "L": L, "NH": NH, "C": C, "Vp": Vp, "version": hdr[1],
           "precision": VERSIONS[hdr[1]][0]}
    bad = [k for k in ("maxT", "V", "L", "NH", "C", "Vp") if cfg[k] <= 0]
    if bad or Vp < V or C % NH:
        why = (f"{bad[0]}={cfg[bad[0]]} is not positive" if bad else
               f"Vp={Vp} is less than V={V}" if Vp < V else f"C={C} is not a multiple of NH={NH}")
        raise ConvertError(f"model file '{path}' has a bad header: {why}")
    shapes = llmc_shapes(maxT, V, Vp, L, NH, C)
    n = sum(_numel(s) for _, s in shapes)
    width = VERSIONS[hdr[1]][1]
    if len(data) != HEADER_BYTES + n * width:
        raise ConvertError(f"model file '{path}' has {len(data)} bytes; its header "
                           f"(L={L} C={C} NH={NH} V={V} Vp={Vp} maxT={maxT}, "
                           f"{cfg['precision']}) needs {HEADER_BYTES + n * width}")
    if sys.byteorder != "little":
        raise ConvertError("remat.convert runs on little-endian hosts only")
    body = bytearray(data[HEADER_BYTES:])  # writable: torch.frombuffer warns on bytes
    if width == 4:
        flat = torch.frombuffer(body, dtype=torch.float32)
    else:
        flat = torch.frombuffer(body, dtype=torch.int16).view(torch.bfloat16).float()
    tensors, off = {}, 0
    for name, shape in shapes:
        k = _numel(shape)
        tensors[name] = flat[off:off + k].reshape(shape).clone()
        off += k
    return cfg, tensors


def gpt2_state_dict(path):
    """(config, state_dict): the model file as Hugging Face GPT-2's
    ``GPT2LMHeadModel`` state_dict (an OrderedDict of fp32 tensors, in
    that model's order; lm_head.weight is transformer.wte.weight itself)."""
    cfg, t = read_model(path)
    V, L = cfg["V"], cfg["L"]
    sd = collections.OrderedDict()
    sd["transformer.wte.weight"] = t["wte"][:V].clone()
    sd["transformer.wpe.weight"] = t["wpe"]
    for i in range(L):
        p = f"transformer.h.{i}."
        sd[p + "ln_1.weight"] = t["ln1w"][i].clone()
        sd[p + "ln_1.bias"] = t["ln1b"][i].clone()
        # Conv1D keeps its weight as (in, out); remat's matrices are (out, in)
        sd[p + "attn.c_attn.weight"] = t["qkvw"][i].t().contiguous()
        sd[p + "attn.c_attn.bias"] = t["qkvb"][i].clone()
        sd[p + "attn.c_proj.weight"] = t["attprojw"][i].t().contiguous()
        sd[p + "attn.c_proj.bias"] = t["attprojb"][i].clone()
        sd[p + "ln_2.weight"] = t["ln2w"][i].clone()
        sd[p + "ln_2.bias"] = t["ln2b"][i].clone()
        sd[p + "mlp.c_fc.weight"] = t["fcw"][i].t().contiguous()
        sd[p + "mlp.c_fc.bias"] = t["fcb"][i].clone()
        sd[p + "mlp.c_proj.weight"] = t["fcprojw"][i].t().contiguous()
        sd[p + "mlp.c_proj.bias"] = t["fcprojb"][i].clone()
    sd["transformer.ln_f.weight"] = t["lnfw"]
    sd["transformer.ln_f.bias"] = t["lnfb"]
    sd["lm_head.weight"] = sd["transformer.wte.weight"]  # tied
    return cfg, sd


def hf_config(cfg):
    """Hugging Face's GPT2Config fields for the shape (remat's GPT-2: tanh
    GELU, layernorm eps 1e-5, tied head)."""
    return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
            "vocab_size": cfg["V"], "n_positions": cfg["maxT"], "n_ctx": cfg["maxT"],
            "n_embd": cfg["C"], "n_layer": cfg["L"], "n_head": cfg["NH"], "n_inner": None,
            "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
            "tie_word_embeddings": True, "torch_dtype": "float32",
            "bos_token_id": 50256, "eos_token_id": 50256}


_ST_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16",
              torch.float64: "F64", torch.int64: "I64", torch.int32: "I32"}


def save_safetensors(tensors, path, metadata=None):
    """Writes tensors (name -> tensor) as a safetensors file: u64 LE header
    size N, N bytes of JSON ({name: {dtype, shape, data_offsets: [begin,
    end]}}, offsets relative to the data that follows; "__metadata__" a map
    of strings), padded with spaces to a multiple of 8, then the tensors'
    bytes, little endian, C order, in the header's order, without gaps.
    Tensors that share storage must not be given twice."""
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, t in tensors.items():
        if t.dtype not in _ST_DTYPES:
            raise ConvertError(f"{name}: dtype {t.dtype} has no safetensors name here")
        raw = t.detach().cpu().contiguous().reshape(-1)
        b = raw.view(torch.uint8).numpy().tobytes() if raw.numel() else b""
        header[name] = {"dtype": _ST_DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def load_safetensors(path):
    """(tensors, metadata) of a safetensors file, checked as the
    specification says: the header is JSON within the file, offsets are in
    order, without gaps, and cover the data exactly."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ConvertError(f"'{path}' is too short for a safetensors file")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ConvertError(f"'{path}': header of {n} bytes runs past the file's end")
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    body = data[8 + n:]
    names = {v: k for k, v in _ST_DTYPES.items()}
    out, end = collections.OrderedDict(), 0
    for name, e in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        a, b = e["data_offsets"]
        dt = names[e["dtype"]]
        size = _numel(e["shape"]) * torch.empty(0, dtype=dt).element_size()
        if a != end or b - a != size:
            raise ConvertError(f"'{path}': {name}'s data_offsets {a}, {b} are not the next "
                               f"{size} bytes after {end}")
        end = b
        buf = bytearray(body[a:b])
        t = torch.frombuffer(buf, dtype=torch.uint8) if buf else torch.empty(0, dtype=torch.uint8)
        out[name] = t.view(dt).reshape(e["shape"])
    if end != len(body):
        raise ConvertError(f"'{path}': {len(body) - end} bytes after the last tensor")
    return out, meta


def convert(model_path, out_dir):
    """Writes out_dir/pytorch_model.bin, out_dir/model.safetensors and
    out_dir/config.json from a remat model file; returns their paths."""
    cfg, sd = gpt2_state_dict(model_path)
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise ConvertError(f"'{out_dir}' exists and is not a directory: give a directory to "
                           f"write pytorch_model.bin, model.safetensors and config.json into")
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as e:
        raise ConvertError(f"cannot make directory '{out_dir}': {e.strerror or e}") from e
    paths = {k: os.path.join(out_dir, k) for k in ("pytorch_model.bin", "model.safetensors",
                                                   "config.json")}
    try:
        torch.save(sd, paths["pytorch_model.bin"])
        st = collections.OrderedDict((k, v) for k, v in sd.items() if k != "lm_head.weight")
        save_safetensors(st, paths["model.safetensors"],
                         {"format": "pt", "source": os.path.basename(model_path)})
        with open(paths["config.json"], "w") as f:
            json.dump(hf_config(cfg), f, indent=2)
            f.write("\n")
    except OSError as e:
        raise ConvertError(f"cannot write into '{out_dir}': {e.strerror or e}") from e
    return cfg, paths


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python3 -m remat.convert",
        description="Converts a remat GPT-2 model file (llm.c's format, fp32 or bf16) to "
                    "Hugging Face GPT-2's names and layouts: OUT/pytorch_model.bin (a "
                    "torch.save'd state_dict for GPT2LMHeadModel, lm_head tied), "
                    "OUT/model.safetensors (the same tensors, lm_head left out as Hugging Face "
                    "does) and OUT/config.json.",
        epilog="Load it with torch: model.load_state_dict(torch.load('OUT/pytorch_model.bin')), "
               "or with transformers: GPT2LMHeadModel.from_pretrained('OUT'). See docs/convert.md.")
    ap.add_argument("model", metavar="MODEL.bin", help="a model file that remat train --save wrote")
    ap.add_argument("out", metavar="OUT", help="the directory to write (made if missing)")
    a = ap.parse_args(argv)
    try:
        cfg, paths = convert(a.model, a.out)
    except ConvertError as e:
        print(f"remat.convert: {e}", file=sys.stderr)
        return 2
    n = sum(_numel(s) for _, s in llmc_shapes(cfg["maxT"], cfg["V"], cfg["V"], cfg["L"],
                                               cfg["NH"], cfg["C"]))
    print(f"model   GPT-2 L={cfg['L']} C={cfg['C']} NH={cfg['NH']} V={cfg['V']} "
          f"maxT={cfg['maxT']} ({cfg['precision']}), {n} parameters")
    for p in paths.values():
        print(f"wrote   {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
