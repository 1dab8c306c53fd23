"""Data parallelism under torchrun: the process group, DDP or FSDP2 wrapping, rank-0 I/O and sharded checkpoints.

The only module of encoderlab that imports `torch.distributed` (docs/architecture.md, convention 9). The trainer calls:

    init(parallel, device)               -> World, device   join torchrun's group (NCCL on CUDA, gloo on CPU)
    check_same_config(world, device, resolved)              every rank runs the same config, or all stop
    follow_main(world)                                       a rank's refusal (rank 0's of the run folder) stops all
    prepare_model(model, train, world)   -> model           activation checkpointing, compile, then DDP or FSDP2
    sum_over_ranks, grad_sync, clip_grad_norm, barrier       the collectives of one step
    save_checkpoint / load_checkpoint / load_weights         one format, whatever wraps the model

Checkpoints (format: runs/checkpoint.py) are the same for every world size, 1 included: every process writes its
part of the AdamW state, keyed by parameter name, through `torch.distributed.checkpoint` (DCP) into `dcp/` (shards
under FSDP2; DDP replicas once), and rank 0 writes the weights, gathered once, into the consolidated
`model.safetensors`, with `model_config.json`, the tokenizer and `state.json`. Resuming reads the weights from that
file (each process keeps its shard) and the optimizer state from `dcp/` (DCP reshards): every checkpoint resumes
under any world size and `parallel`, and fine-tuning, export and `init.from_weights` read any checkpoint unchanged.
The folder is renamed by rank 0 from a temporary name once every rank has written, so a cut write is never LATEST.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel
from torch.utils.checkpoint import checkpoint as recompute

from encoderlab.core.errors import EncoderlabError, Failed, option
from encoderlab.core.io import atomic_dir
from encoderlab.runs import checkpoint
from encoderlab.runs import optim_state as optim_state_files

PARALLEL = ("none", "ddp", "fsdp2")
DCP_DIR = "dcp"  # the optimizer state inside a checkpoint folder (older FSDP2 checkpoints: the model too)
_TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


class DistributedError(EncoderlabError):
    """A parallel setting that cannot run in this launch (wrong launcher, device or combination)."""


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        """The rank that logs, shows progress and writes files every rank shares."""
        return self.rank == 0


def torchrun_world() -> World | None:
    """The world torchrun describes in the environment, or None for a plain `python` / `encoderlab` process."""
    present = [k for k in _TORCHRUN_ENV if k in os.environ]
    if not present:
        return None
    if len(present) < len(_TORCHRUN_ENV):
        missing = ", ".join(k for k in _TORCHRUN_ENV if k not in os.environ)
        raise DistributedError(f"the environment sets {', '.join(present)} but not {missing}: launch with torchrun "
                               "(which sets all three) or unset them for a single process")
    return World(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"]))


def is_main_process() -> bool:
    """Rank 0 of a torchrun launch, or a plain process: for printing before the trainer exists."""
    return os.environ.get("RANK", "0") == "0"


def init(parallel: str, device: torch.device) -> tuple[World, torch.device]:
    """Join torchrun's process group when `parallel` asks for it; the device each process trains on. Under a
    multi-process torchrun `parallel` must be 'ddp' or 'fsdp2' ('none' would train the whole batch in every process
    into one run folder); without torchrun they form a group of one: the same code and checkpoints on a laptop."""
    if parallel not in PARALLEL:
        raise DistributedError(f"train.parallel={parallel!r} is not allowed: use one of {', '.join(PARALLEL)}")
    launched = torchrun_world()
    if parallel == "none":
        if launched is not None and launched.size > 1:
            raise DistributedError(
                f"launched by torchrun with WORLD_SIZE={launched.size} but train.parallel='none': every process "
                f"would train the whole batch and write the same run folder; set {option('set', 'train.parallel=ddp')} "
                "or fsdp2")
        return World(), device
    world = launched or World()
    if device.type == "cuda":
        if world.size > 1 and device.index not in (None, world.local_rank):
            raise DistributedError(f"train.device={device} under torchrun: each process trains on cuda:LOCAL_RANK; "
                                   "use train.device=cuda or auto")
        device = torch.device("cuda", world.local_rank if launched else (device.index or 0))
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        if launched is None:  # a group of one needs no rendezvous
            dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
        else:  # torchrun's MASTER_ADDR / MASTER_PORT (or its c10d rendezvous) tell the processes where to meet
            dist.init_process_group(backend, device_id=device if device.type == "cuda" else None)
        atexit.register(_shutdown)
    elif dist.get_world_size() != world.size:
        raise DistributedError(f"a process group of {dist.get_world_size()} processes already exists here, but "
                               f"this launch describes {world.size}")
    return world, device


def _shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


# ---- the ranks agree ---------------------------------------------------------------------------------------


def check_same_config(world: World, device: torch.device, resolved: dict) -> None:
    """Every rank's resolved config (and what decides its data), compared before anything is written or trained:
    ranks launched with other settings would train other weights (a different LR) or hang in a collective (other
    steps) while config.yaml records rank 0's. A mismatch stops every rank with the same line naming the keys."""
    if world.size == 1:
        return
    flat = _flatten(resolved)
    text = json.dumps(flat, sort_keys=True)
    digest = torch.frombuffer(bytearray(hashlib.sha256(text.encode()).digest()), dtype=torch.uint8).to(device)
    digests = [torch.empty_like(digest) for _ in range(world.size)]
    dist.all_gather(digests, digest)
    if all(torch.equal(d, digests[0]) for d in digests):
        return
    configs = [json.loads(t) for t in _gather_text(world, device, text)]  # every rank's, to name what differs
    keys = sorted({k for c in configs for k in c if len({_short(other, k) for other in configs}) > 1})
    shown = "; ".join(f"{k} ({', '.join(f'rank {r}: {_short(c, k)}' for r, c in enumerate(configs))})"
                      for k in keys[:4]) + (f"; and {len(keys) - 4} more" if len(keys) > 4 else "")
    raise DistributedError(f"the {world.size} torchrun processes resolved different configs, so none started: "
                           f"{shown}; launch every rank with the same config file, --set options and data")


@contextmanager
def follow_main(world: World) -> Iterator[None]:
    """A collective after what the ranks check apart (rank 0 alone the run folder): a refusal on any rank stops every
    rank with its line, where the others would wait in their next collective for the rank that left, until a timeout."""
    refusal = None
    try:
        yield
    except EncoderlabError as exc:
        refusal = exc
    box = [(str(refusal), getattr(refusal, "exit_code", 2)) if refusal else None] * world.size  # this rank's
    if world.size > 1:  # every rank takes part, the one that refused too
        dist.all_gather_object(box, box[0])
    if said := next((s for s in box if s is not None), None):  # the lowest rank's: rank 0's when it refused
        raise refusal or (Failed if said[1] == Failed.exit_code else EncoderlabError)(said[0])  # its exit code


def _flatten(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        out.update(_flatten(value, f"{name}.") if isinstance(value, dict) and value else {name: value})
    return out


def _short(config: dict, key: str) -> str:
    text = json.dumps(config[key]) if key in config else "missing"
    return text if len(text) <= 40 else f"{text[:30]}...{hashlib.sha256(text.encode()).hexdigest()[:6]}"


def _gather_text(world: World, device: torch.device, text: str) -> list[str]:
    """Every rank's `text`, as bytes in tensors (no pickle between the processes either)."""
    data = torch.frombuffer(bytearray(text.encode()), dtype=torch.uint8).to(device)
    size = torch.tensor([data.numel()], device=device)
    sizes = [torch.empty_like(size) for _ in range(world.size)]
    dist.all_gather(sizes, size)
    padded = torch.zeros(int(max(sizes)), dtype=torch.uint8, device=device)
    padded[: data.numel()] = data
    gathered = [torch.empty_like(padded) for _ in range(world.size)]
    dist.all_gather(gathered, padded)
    return [bytes(t[: int(n)].cpu().numpy()).decode() for t, n in zip(gathered, sizes)]


# ---- the model ---------------------------------------------------------------------------------------------


def prepare_model(model: nn.Module, train, world: World, device: torch.device) -> nn.Module:
    """Apply the trainer's speed switches and wrap for data parallelism, in the order that composes (torchtitan's):
    activation checkpointing inside compile inside FSDP2/DDP. Parameter names never change, so checkpoints of every
    combination load into every other."""
    if train.activation_checkpointing or train.compile:
        for block in blocks(model):
            around = train.compile and compiles_around_attention(block, device)
            if around:
                block.before_attention = torch.compile(block.before_attention)
                block.after_attention = torch.compile(block.after_attention)
            forward = block.forward
            if train.activation_checkpointing:
                forward = _recomputed(forward)
            if train.compile and not around:
                forward = torch.compile(forward)
            block.forward = forward  # an instance attribute: nn.Module.__call__ and FSDP2's hooks run around it
    if train.parallel == "ddp":
        return DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
    if train.parallel == "fsdp2":
        mesh = init_device_mesh(device.type, (world.size,))
        # bf16 all-gathers halve the traffic; the shards (AdamW's master weights) and gradient reduction stay fp32.
        mp = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
              if train.dtype == "bf16" else MixedPrecisionPolicy())
        for block in blocks(model):
            fully_shard(block, mesh=mesh, mp_policy=mp)
        # The root group holds the embedding, the final norm and the LM head: a tied head is the embedding's own
        # parameter, so it must be sharded once, here, with it.
        fully_shard(model, mesh=mesh, mp_policy=mp)
    return model


def compiles_around_attention(block: nn.Module, device: torch.device) -> bool:
    """Whether `train.compile` compiles this block in two pieces, before and after its attention, which stays eager.
    On CPU, encoderlab's own blocks: the document-sparse attention there (model/attention.py `Varlen`) lays each batch
    out in buckets of other shapes, which would recompile a whole compiled block every batch, and the dense mask that
    compiles instead does 1.7x the attention work of packed ~180-token documents. On CUDA the whole block compiles,
    flex_attention's kernel inside it."""
    return device.type == "cpu" and hasattr(block, "before_attention")


def blocks(model: nn.Module) -> nn.ModuleList:
    """The layers compile, activation checkpointing and FSDP2 wrap one by one: encoderlab's own, or a transformers
    model's (`TransformersMaskedLM.blocks`)."""
    return model.blocks if hasattr(model, "blocks") else model.model.layers


def compile_kernel(kernel):
    """flex_attention's fused kernel (model/attention.py `for_pretraining`): compiled once per shape."""
    return torch.compile(kernel, dynamic=False)


def _recomputed(forward):
    def run(*args, **kwargs):  # a transformers layer takes its masks and positions by keyword
        # Non-reentrant: works under compile, with FSDP2's hooks and with inputs that need no grad.
        return recompute(forward, *args, use_reentrant=False, **kwargs)

    return run


def unwrap(model: nn.Module) -> nn.Module:
    """The TransformerLM itself: DDP wraps it; FSDP2 changes it in place."""
    return model.module if isinstance(model, DistributedDataParallel) else model


def is_sharded(model: nn.Module) -> bool:
    return isinstance(model, FSDPModule)


# ---- collectives of a step ---------------------------------------------------------------------------------


def sum_over_ranks(world: World, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Each tensor summed over all ranks, in one all-reduce (float64: exact for token counts); no host sync."""
    if world.size == 1:
        return tensors
    packed = torch.stack([t.detach().double().reshape(()) for t in tensors])
    dist.all_reduce(packed)
    return tuple(v.to(t.dtype) for v, t in zip(packed.unbind(), tensors))


def grad_sync(model: nn.Module, last_micro_batch: bool):
    """DDP all-reduces gradients once per step, after the last micro-batch; FSDP2 reduce-scatters after each
    micro-batch, which keeps only sharded gradients between micro-batches (memory over communication)."""
    if isinstance(model, DistributedDataParallel) and not last_micro_batch:
        return model.no_sync()
    return nullcontext()


def clip_grad_norm(model: nn.Module, max_norm: float) -> torch.Tensor:
    """Global gradient norm (clipped to `max_norm`), as a plain tensor on every rank whatever the sharding."""
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    return norm.full_tensor() if isinstance(norm, DTensor) else norm


def local_parameters(model: nn.Module) -> Iterator[torch.Tensor]:
    """This rank's part of each parameter: its shard under FSDP2, the whole tensor otherwise."""
    for p in model.parameters():
        yield p.to_local() if isinstance(p, DTensor) else p


def barrier(world: World) -> None:
    if world.size > 1:
        dist.barrier()


# ---- checkpoints -------------------------------------------------------------------------------------------


def save_checkpoint(run_dir: Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict,
                    *, tokenizer_dir: Path, world: World) -> Path:
    """Write the checkpoint of `step` (see the module docstring); every rank must call this, and it returns once
    the checkpoint is complete and LATEST names it."""
    dest = run_dir / "checkpoints" / checkpoint.checkpoint_name(step)
    # Every rank gathers the full weights, only rank 0 receives them (cpu_offload). The state-dict hook first reshards
    # FSDP2's root parameters, left unsharded by an evaluation's forward: again the tensors the optimizer holds.
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    optim_state = get_optimizer_state_dict(model, optimizer)  # what this rank holds, by parameter name
    with _shared_atomic_dir(dest, world) as tmp:
        with _one_process_is_intended(), _interrupt_stays_an_interrupt():
            dcp.save({"optim": optim_state}, checkpoint_id=tmp / DCP_DIR)
        if world.is_main:
            checkpoint.write_folder(tmp, step, full, unwrap(model).config, tokenizer_dir, state)
    if world.is_main:
        checkpoint.set_latest(run_dir, dest)
    barrier(world)
    return dest


@contextmanager
def _interrupt_stays_an_interrupt() -> Iterator[None]:
    """DCP wraps whatever stops a save in its CheckpointException, Ctrl-C too: unwrapped, so that an interrupt during
    a checkpoint is said as one between steps is (the unfinished checkpoint is never named by LATEST)."""
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        yield
    except CheckpointException as e:
        if any(isinstance(failure[0] if isinstance(failure, tuple) else failure, KeyboardInterrupt)
               for failure in e.failures.values()):
            raise KeyboardInterrupt from None
        raise


@contextmanager
def _one_process_is_intended() -> Iterator[None]:
    """Without a process group DCP warns that it reads or writes in one process: it should."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


@contextmanager
def _shared_atomic_dir(dest: Path, world: World) -> Iterator[Path]:
    """`atomic_dir` of rank 0 that every rank writes into, renamed once all wrote and the checksums are in."""
    if world.is_main:
        with atomic_dir(dest) as tmp:
            _broadcast(world, str(tmp))
            yield tmp
            barrier(world)  # every rank has written its files: the manifest, last, covers them all
            checkpoint.write_manifest(tmp)
    else:
        tmp = Path(_broadcast(world, None))
        yield tmp
        barrier(world)


def _broadcast(world: World, value):
    """Rank 0's `value` (strings, numbers) on every rank: between live processes, nothing read from disk."""
    box = [value]
    if world.size > 1:
        dist.broadcast_object_list(box, src=0)
    return box[0]


def load_checkpoint(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Model and optimizer state into a plain, DDP or FSDP2 model, whatever world size and wrapping wrote them."""
    checkpoint.verify(path, skip=(checkpoint.WEIGHTS,))  # the weights are verified where load_weights reads them
    if not (path / DCP_DIR / ".metadata").exists():
        # An optimizer.pt checkpoint predates the one format and the derive_seed mask streams: converted, its resume
        # would still draw other masks than its first run did, so it is refused rather than silently continued.
        what = ("was written by an older encoderlab (optimizer.pt, no dcp/; its MLM masks came from another seed "
                "stream, so a resume could not continue the same run)") if (path / "optimizer.pt").exists() else \
            f"holds weights only (no optimizer state in {DCP_DIR}/)"
        raise EncoderlabError(f"{path} {what}: it cannot be resumed or branched from; its weights still fine-tune and "
                              f"export, and a new run continues them with {option('set', f'init.from_weights={path}')}")
    load_weights(path, model)
    # DCP reshards: the state dict names what this process holds, DCP reads exactly that from the files.
    optim_state = get_optimizer_state_dict(model, optimizer)
    with _one_process_is_intended():
        optim_state_files.load({"optim": optim_state}, path / DCP_DIR)
    set_optimizer_state_dict(model, optimizer, optim_state)


def load_weights(path: Path, model: nn.Module) -> None:
    """The weights of a checkpoint, from the consolidated `model.safetensors` every checkpoint has: alone
    (`init.from_weights`) or as the first half of `load_checkpoint`."""
    if not is_sharded(model):
        checkpoint.load_weights(path, unwrap(model))
        return
    weights = checkpoint.read_weights(path, model.state_dict())
    set_model_state_dict(model, weights, options=StateDictOptions(full_state_dict=True))
