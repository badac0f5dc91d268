"""The winner proven as a user runs it: llama-server from the build, with the winning flags at the tuned context, on
loopback, given a request whose prompt fills the depth twice: the first is a server's first (a GPU backend may make
its pipelines then: seconds), the second is measured; its own timings (time to first token, decode speed) are what it
reports, with the first's time to first token beside them. "It fits" is seen, not assumed: a server that cannot load
or answer is a failure with its log."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from buildmgr.core import proc

LOAD_TIMEOUT_S = 600.0
REQUEST_TIMEOUT_S = 600.0
TAIL_LINES = 12


@dataclass(frozen=True)
class Served:
    command: tuple[str, ...]
    log: str
    failure: str | None = None
    load_s: float | None = None
    prompt_tokens: int = 0
    ttft_ms: float | None = None  # the prompt's prefill: the first token comes after it
    prefill_ts: float | None = None
    decode_ts: float | None = None
    generated: int = 0
    tail: tuple[str, ...] = ()
    first_ttft_ms: float | None = None  # the same of the server's first request (its warm-up)

    def to_json(self) -> dict[str, Any]:
        return {
            "command": list(self.command),
            "log": self.log,
            "failure": self.failure,
            "load_s": self.load_s,
            "prompt_tokens": self.prompt_tokens,
            "ttft_ms": self.ttft_ms,
            "first_ttft_ms": self.first_ttft_ms,
            "prefill_ts": self.prefill_ts,
            "decode_ts": self.decode_ts,
            "generated": self.generated,
            **({"tail": list(self.tail)} if self.tail else {}),
        }

    def text(self) -> str:
        """What the proof saw, for people; a figure the server's reply did not carry says so."""

        def said(value: float | None, unit: str) -> str:
            return "not reported" if value is None else f"{value:g} {unit}"

        return (
            f"llama-server answered {self.prompt_tokens} prompt tokens in {said(self.ttft_ms, 'ms')} (first token; "
            f"its first request took {said(self.first_ttft_ms, 'ms')}), decoded {self.generated} at "
            f"{said(self.decode_ts, 't/s')}"
        )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            status: int = answer.status
            return status
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return 0


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    data = json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as answer:
        found: dict[str, Any] = json.loads(answer.read())
        return found


def _tail(log: Path) -> tuple[str, ...]:
    lines = log.read_text(errors="replace").splitlines() if log.is_file() else []
    return tuple(lines[-TAIL_LINES:])


def serve(
    server: Path,
    model: Path,
    words: Sequence[str],
    ctx: int,
    prompt: Sequence[int],
    n_gen: int,
    environ: Mapping[str, str],
    log: Path,
) -> Served:
    """Start it, wait until it is ready, send the one request, stop it."""
    port = free_port()
    command = [str(server), "-m", str(model), "-c", str(ctx), *words, "--host", "127.0.0.1", "--port", str(port)]
    command += ["-np", "1"]
    base = f"http://127.0.0.1:{port}"
    said = tuple(command)
    started = time.monotonic()
    try:
        with proc.started(command, log, env=dict(environ)) as process:
            while (status := _get(f"{base}/health")) != 200:
                if process.poll() is not None:
                    return Served(said, str(log), f"llama-server exited ({process.returncode}) before it was ready",
                                  tail=_tail(log))  # fmt: skip
                if time.monotonic() - started > LOAD_TIMEOUT_S:
                    return Served(said, str(log), f"not ready after {LOAD_TIMEOUT_S:.0f} s (health {status})",
                                  tail=_tail(log))  # fmt: skip
                time.sleep(0.2)
            load_s = round(time.monotonic() - started, 2)
            body = {"prompt": list(prompt), "n_predict": n_gen, "cache_prompt": False, "ignore_eos": True}
            try:  # the warm-up decodes two tokens: the prefill's graph and the decode's are both made
                first = _post(f"{base}/completion", body | {"n_predict": 2})
                answer = _post(f"{base}/completion", body)
            except (OSError, ValueError) as err:
                return Served(said, str(log), f"the request failed: {err}", load_s, tail=_tail(log))
    except OSError as err:
        return Served(said, str(log), f"could not start: {err}")
    timings = answer.get("timings") or {}
    generated = int(timings.get("predicted_n") or 0)
    if generated < n_gen:
        return Served(said, str(log), f"generated {generated} of {n_gen} tokens", load_s, tail=_tail(log))
    return Served(
        said,
        str(log),
        None,
        load_s,
        int(timings.get("prompt_n") or 0),
        round(float(timings["prompt_ms"]), 2) if "prompt_ms" in timings else None,
        round(float(timings["prompt_per_second"]), 2) if "prompt_per_second" in timings else None,
        round(float(timings["predicted_per_second"]), 2) if "predicted_per_second" in timings else None,
        generated,
        first_ttft_ms=_ms((first.get("timings") or {}).get("prompt_ms")),
    )


def _ms(value: object) -> float | None:
    return round(float(value), 2) if isinstance(value, (int, float)) else None
