"""One replica group writes verl's HSDP checkpoints (actors/verl_plugins/checkpoint.py), and every rank resumes.

Four gloo ranks on CPU in a fresh interpreter with the job's env (the CPU platform and our plugins, as
VERL_USE_EXTERNAL_MODULES loads them): verl's own (ddp 2, fsdp 2) mesh, FSDP1 HYBRID_SHARD over a tiny Qwen3, AdamW,
verl's own FSDPCheckpointManager. On f4067d9 all four ranks wrote model and optimizer shards, ranks r and r+2
byte for byte the same (h100_2x8: ranks r and r+8, ~197 GB a save)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")

ROOT = Path(__file__).resolve().parents[3]

WORLD = """
import json, os, sys, torch, torch.multiprocessing as mp
import verl  # loads VERL_USE_EXTERNAL_MODULES: the CPU platform, the process-group and checkpoint plugins
from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

def rank_main(rank, port, out, q):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="4")
    import torch.distributed as dist
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy
    from transformers import Qwen3Config, Qwen3ForCausalLM
    from verl.utils.distributed import initialize_global_process_group_ray
    from verl.workers.engine.fsdp.utils import create_device_mesh, get_sharding_strategy

    initialize_global_process_group_ray(timeout_second=None, backend="gloo")
    mesh = create_device_mesh(world_size=4, fsdp_size=2)
    assert get_sharding_strategy(mesh) == ShardingStrategy.HYBRID_SHARD
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(Qwen3Config(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                         architectures=["Qwen3ForCausalLM"]))
    model = FSDP(model, device_mesh=mesh, sharding_strategy=ShardingStrategy.HYBRID_SHARD,
                 device_id=torch.device("cpu"), sync_module_states=True, use_orig_params=False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)

    def step(seed):
        g = torch.Generator().manual_seed(seed * 10 + rank)  # each rank its own data: HSDP all-reduces the grads
        ids = torch.randint(0, 256, (2, 12), generator=g)
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()

    step(1)
    manager = FSDPCheckpointManager(model=model, optimizer=opt, lr_scheduler=None, processing_class=None,
                                    checkpoint_config={"save_contents": ["model", "optimizer", "extra"],
                                                       "load_contents": ["model", "optimizer", "extra"]})
    manager.save_checkpoint(local_path=out, global_step=1)
    params = [p.detach().clone() for p in model.parameters()]
    moments = [{k: v.clone() for k, v in s.items()} for s in opt.state.values()]
    step(2)  # params and moments move away from the checkpoint
    moved = any(not torch.equal(a, p) for a, p in zip(params, model.parameters()))
    manager.load_checkpoint(out)
    same = all(torch.equal(a, p) for a, p in zip(params, model.parameters())) and all(
        all(torch.equal(m[k], s[k]) for k in m) for m, s in zip(moments, opt.state.values()))
    full = [p.numel() for p in model.parameters()]
    with FSDP.summon_full_params(model):  # the weights the merged export must hold
        weights = {n.replace("_fsdp_wrapped_module.", ""): p.detach().clone() for n, p in model.named_parameters()}
    if rank == 0:
        torch.save(weights, out + ".weights")
    q.put({"rank": rank, "moved": moved, "restored": same, "local_numel": sum(full),
           "adam_keys": sorted(next(iter(opt.state.values())).keys())})
    dist.destroy_process_group()

if __name__ == "__main__":
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, int(sys.argv[1]), sys.argv[2], q)) for r in range(4)]
    for p in procs:
        p.start()
    seen = sorted((q.get(timeout=240) for _ in procs), key=lambda r: r["rank"])
    for p in procs:
        p.join(60)
    print(json.dumps(seen))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(400)
@pytest.mark.verl_cpu  # four gloo ranks importing verl: make test-verl-cpu
def test_one_replica_group_writes_and_every_rank_resumes(tmp_path):
    from cluster.verl.job import platform_env
    from orchestra.config import load_config

    env = platform_env(load_config(["experiment=verl_cpu_tiny"]))
    assert "actors.verl_plugins.checkpoint" in env["VERL_USE_EXTERNAL_MODULES"].split(",")
    assert "actors.verl_plugins.checkpoint" in platform_env(load_config(["experiment=h100_2x8"]))[
        "VERL_USE_EXTERNAL_MODULES"].split(",")
    (tmp_path / "world.py").write_text(WORLD)
    out = tmp_path / "global_step_1"
    r = subprocess.run([sys.executable, str(tmp_path / "world.py"), str(free_port()), str(out)], capture_output=True,
                       text=True, timeout=380, env={**os.environ, **env, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr[-4000:]
    ranks = json.loads(r.stdout.strip().splitlines()[-1])
    assert [x["rank"] for x in ranks] == [0, 1, 2, 3]
    assert all(x["moved"] and x["restored"] for x in ranks), ranks  # replica 1 resumed from replica 0's files
    files = {p.name: p.stat().st_size for p in out.glob("*.pt")}
    for kind in ("model", "optim"):  # replica 0 (ranks 0, 1: the files verl's model_merger reads) writes
        assert {f for f in files if f.startswith(kind)} == {f"{kind}_world_size_4_rank_{r}.pt" for r in (0, 1)}
    assert {f for f in files if f.startswith("extra_state")} == {f"extra_state_world_size_4_rank_{r}.pt"
                                                                 for r in range(4)}  # RNG per rank
    # what a resume needs, once: each fsdp shard's fp32 weights plus AdamW's two moments, 12 bytes a parameter
    numel = sum(x["local_numel"] for x in ranks[:2])
    assert {"exp_avg", "exp_avg_sq"} <= set(ranks[0]["adam_keys"])
    written = sum(size for f, size in files.items() if not f.startswith("extra_state"))
    assert 12 * numel <= written < 12 * numel * 1.5, (written, numel)
    # the export (cluster/verl/stage.py export_hf: verl's model_merger) reads replica 0's files only
    merged = tmp_path / "hf"
    m = subprocess.run([sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp", "--local_dir",
                        str(out), "--target_dir", str(merged)], capture_output=True, text=True, timeout=300)
    assert m.returncode == 0, m.stderr[-3000:]
    import torch
    from safetensors.torch import load_file

    exported, weights = load_file(merged / "model.safetensors"), torch.load(str(out) + ".weights")
    assert set(exported) == set(weights)
    for name, w in weights.items():  # the merger writes bf16
        assert torch.allclose(exported[name].float(), w, rtol=1e-2, atol=1e-3), name
