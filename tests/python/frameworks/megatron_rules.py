"""Megatron-LM's rules for the flags remat emits (core 0.13.0 to main
d98e8a6), as test code: parse (training/arguments.py's flags), validate
(validate_args and TransformerConfig.__post_init__) and the layers each
(virtual) stage builds and recomputes (core/recompute.py). Not Megatron: see
README.md beside this file."""
import argparse
import re


class Rejected(Exception):
    """What Megatron would refuse, with its reason."""


def _parser():
    p = argparse.ArgumentParser(prog="megatron", add_help=False, exit_on_error=False)
    for f in ("--num-layers", "--pipeline-model-parallel-size", "--tensor-model-parallel-size",
              "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
              "--num-virtual-stages-per-pipeline-rank", "--num-layers-per-virtual-pipeline-stage",
              "--recompute-num-layers", "--micro-batch-size", "--global-batch-size", "--seq-length",
              "--microbatch-group-size-per-virtual-pipeline-stage"):
        p.add_argument(f, type=int, default=None)
    p.add_argument("--pipeline-model-parallel-layout", type=str, default=None)
    p.add_argument("--recompute-granularity", choices=["full", "selective"], default=None)
    p.add_argument("--recompute-method", choices=["uniform", "block"], default=None)
    p.add_argument("--recompute-modules", nargs="*", default=None)
    p.add_argument("--no-overlap-p2p-communication", action="store_false", dest="overlap_p2p_comm")
    return p


def parse(flags):
    try:
        args, rest = _parser().parse_known_args(flags)
    except (argparse.ArgumentError, SystemExit) as e:
        raise Rejected(f"argparse: {e}")
    if rest:
        raise Rejected(f"unrecognized arguments: {rest}")
    return args


# pipeline_parallel_layer_layout.py parse_str_to_list
def layout_stages(text):
    text = text.replace(",", "")
    for pat in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        text = re.sub(pat, lambda m: m.group(1) * int(m.group(2)), text)
    out = []
    for stage in text.split("|"):
        for ch in stage:
            if ch not in "ELtm":
                raise Rejected(f"Invalid layer character: {ch}")
        out.append(stage)
    return out


def _check(cond, why):
    if not cond:
        raise Rejected(why)


def validate(a, world_size):
    """validate_args and TransformerConfig's checks; fills a.vpp, a.dp,
    a.num_microbatches and a.layers[pp_rank][vpp_rank]."""
    _check(a.num_layers is not None and a.pipeline_model_parallel_size is not None, "sizes missing")
    pp, tp = a.pipeline_model_parallel_size, a.tensor_model_parallel_size or 1
    _check(world_size % (pp * tp) == 0, "world size not divisible by tp x pp")
    a.dp = world_size // (pp * tp)
    _check(sum(x is not None for x in (a.num_layers_per_virtual_pipeline_stage,
                                       a.num_virtual_stages_per_pipeline_rank,
                                       a.pipeline_model_parallel_layout)) <= 1,
           "No more than one of the virtual-stage and layout arguments can be set")
    a.vpp = None
    first, last = a.decoder_first_pipeline_num_layers, a.decoder_last_pipeline_num_layers
    if a.pipeline_model_parallel_layout is not None:
        stages = layout_stages(a.pipeline_model_parallel_layout)
        _check(len(stages) % pp == 0, "layout length not divisible by pp")
        a.vpp = len(stages) // pp if len(stages) // pp > 1 else None
        _check(first is None and last is None, "layout cannot be set with other layout arguments")
        flat = "".join(stages)
        _check(flat[:1] == "E" and flat[-1:] == "L", "the first layer must be embedding, the last loss")
        _check(flat.count("E") == 1 and flat.count("L") == 1, "embedding and loss exactly once")
        _check(flat.count("t") == a.num_layers, "decoder layers in the layout != num_layers")
        v = a.vpp or 1
        a.layers = [[stages[c * pp + r].count("t") for c in range(v)] for r in range(pp)]
    elif a.num_virtual_stages_per_pipeline_rank is not None or a.num_layers_per_virtual_pipeline_stage is not None:
        if a.num_virtual_stages_per_pipeline_rank is None:
            _check(first is None and last is None, "uneven pipeline needs --num-virtual-stages-per-pipeline-rank")
            _check(a.num_layers % pp == 0, "layers not divisible by pp")
            _check((a.num_layers // pp) % a.num_layers_per_virtual_pipeline_stage == 0, "per stage / per virtual")
            a.vpp = a.num_layers // pp // a.num_layers_per_virtual_pipeline_stage
        else:
            a.vpp = a.num_virtual_stages_per_pipeline_rank
        if a.vpp == 1:
            a.vpp = None
        a.layers = _uneven(a, pp, first, last)
    else:
        a.layers = _uneven(a, pp, first, last)
    if a.vpp is not None:
        if a.overlap_p2p_comm:
            _check(pp > 1, "interleaved schedule needs pp > 1")
        else:
            _check(pp > 2, "interleaved schedule without p2p overlap needs pp > 2")
    _recompute(a, pp)
    mbs = a.micro_batch_size or 1
    gbs = a.global_batch_size if a.global_batch_size is not None else mbs * a.dp
    _check(gbs % (mbs * a.dp) == 0, "global batch not divisible by micro-batch x dp")
    a.num_microbatches = gbs // (mbs * a.dp)
    if a.vpp is not None:  # schedules.py: micro-batch groups of pp
        group = a.microbatch_group_size_per_virtual_pipeline_stage or pp
        _check(pp <= group <= a.num_microbatches, "contiguous micro-batches must range in [PP, M]")
        rem = a.num_microbatches % group
        _check(not (0 < rem < pp), "the remainder of M by the group must be 0 or >= PP")
    return a


def _uneven(a, pp, first, last):
    """transformer_config.py's uneven pipeline checks; layers per (rank, chunk)."""
    v, n, mid = a.vpp or 1, a.num_layers, pp
    if first is None and last is None:
        _check(n % pp == 0, "Number of layers should be divisible by the pipeline-model-parallel size")
        _check((n // pp) % v == 0, "layers per stage not divisible by virtual stages")
        return [[n // pp // v] * v for _ in range(pp)]
    for name, k in (("first", first), ("last", last)):
        if k is not None:
            _check(k > 0, f"num_layers_in_{name}_pipeline_stage must be larger than 0")
            _check(k % v == 0, f"layers at the {name} stage not divisible by the virtual stages")
            n -= k
            mid -= 1
    _check(bool(n) == bool(mid), "middle layers and middle stages go together")
    if mid:
        _check(n % mid == 0, "middle layers not divisible by the middle stages")
        _check((n // mid) % v == 0, "middle layers per rank not divisible by the virtual stages")
    per = n // mid if mid else 0
    rows = []
    for r in range(pp):
        k = first if r == 0 and first is not None else last if r == pp - 1 and last is not None else per
        rows.append([k // v] * v)
    return rows


ALLOWED_MODULES = {"core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe",
                   "shared_experts", "gdn_norm_out", "gdp_in_proj", "gdp_qkv", "mhc"}


def _recompute(a, pp):
    g = a.recompute_granularity
    if g is None:
        _check(a.recompute_method is None and a.recompute_num_layers is None, "recompute flags without granularity")
        return
    if g == "full":
        _check(a.recompute_method in ("block", "uniform"), "full recompute needs method block or uniform")
        _check(a.recompute_num_layers is not None and a.recompute_num_layers >= 1,
               "recompute_num_layers must be between 1 and num_layers_per_pipeline_rank")
    else:
        _check(a.recompute_method is None, "selective recompute takes no method")
        _check(a.recompute_num_layers is None, "selective recompute: recompute_num_layers must be None")
        mods = a.recompute_modules if a.recompute_modules is not None else ["core_attn"]
        _check(set(mods) <= ALLOWED_MODULES, f"Invalid choices for recompute_modules: {mods}")


def recomputed(a):
    """Per (pp_rank, vpp_rank): how many of its layers are recomputed and
    how ("full" or the selective modules); core/recompute.py."""
    out = {}
    for r, row in enumerate(a.layers):
        for c, n in enumerate(row):
            if a.recompute_granularity == "full" and a.recompute_method == "block":
                out[(r, c)] = (min(n, a.recompute_num_layers), "full")
            elif a.recompute_granularity == "selective":
                out[(r, c)] = (n, "selective")
            else:
                out[(r, c)] = (0, None)
    return out
