"""A small OpenAI-compatible server for an HF causal LM on CPU (tests and the demo, not production).

    python scripts/smollm2/serve.py MODEL_DIR [--port P] [--host H] [--model NAME]

The port defaults to $PORT (set by hpceval's ``command`` deployment). The model loads before the
port is bound, so ``/health`` answering means ready. ``/v1/completions`` takes string or token-id
prompts, ``max_tokens`` (16), ``temperature`` (0 = greedy and deterministic; sampled otherwise,
repeatable with ``seed``), ``top_p``, ``stop``, and ``echo`` + ``logprobs`` for prompt scoring in
the OpenAI format (what lm-eval's log-likelihood tasks read). ``/v1/chat/completions`` uses the
tokenizer's chat template. vLLM's ``/tokenize``, ``/detokenize`` and ``/tokenizer_info`` let
lm-eval's ``local-completions`` use this server's tokenizer instead of the hub's. Also
``/v1/models`` and ``/health``. One request computes at a time (a lock around the model); no
streaming, no ``n`` > 1. Needs torch and transformers (scripts/smollm2/install.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import accumulate
from pathlib import Path
from typing import Any

# Before transformers and huggingface_hub are imported: they read these once, at import.
for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TQDM_DISABLE"):
    os.environ.setdefault(_name, "1")  # never the hub; no progress bars in job logs

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

SPECIALS = ("eos", "bos", "pad", "unk")


@dataclass
class Output:
    text: str
    finish: str
    n_prompt: int
    n_gen: int
    logprobs: dict[str, list[Any]] | None = None
    seconds: float = 0.0


class Engine:
    def __init__(self, model_dir: Path, threads: int, dtype: str = "float32") -> None:
        torch.set_num_threads(threads)
        self.tok = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype))
        self.model.eval()  # type: ignore[no-untyped-call]
        self.max_len = int(getattr(self.model.config, "max_position_embeddings", 2048))
        eos = self.model.generation_config.eos_token_id
        self.eos = {*(eos if isinstance(eos, list) else [eos]), self.tok.eos_token_id} - {None}
        self.vocab = len(self.tok)
        self.lock = threading.Lock()

    def encode(self, text: str, special: bool = False) -> list[int]:
        return list(self.tok(text, add_special_tokens=special).input_ids)

    def decode(self, ids: list[int], skip_special: bool = False) -> str:
        return str(self.tok.decode(ids, skip_special_tokens=skip_special))

    def chat_prompt(self, messages: list[dict[str, Any]], generation_prompt: bool = True) -> str:
        for m in messages:  # OpenAI content parts -> plain text
            if isinstance(m.get("content"), list):
                m["content"] = "".join(p.get("text", "") for p in m["content"]
                                       if isinstance(p, dict))
        return str(self.tok.apply_chat_template(messages, tokenize=False,
                                                add_generation_prompt=generation_prompt))

    def _entry(self, lp: torch.Tensor, token: int, k: int) -> tuple[str, float, dict[str, float]]:
        values, ids = lp.topk(k)
        top = {self.decode([i]): v for i, v in zip(ids.tolist(), values.tolist(), strict=True)}
        return self.decode([token]), lp[token].item(), top

    def run(self, prompt: list[int], max_tokens: int, temperature: float = 0.0,
            top_p: float = 1.0, stops: list[str] | None = None, logprobs: int | None = None,
            echo: bool = False, seed: int | None = None) -> Output:
        if not prompt:
            raise ValueError("the prompt is empty")
        if not all(0 <= t < self.vocab for t in prompt):
            raise ValueError(f"token ids must lie in [0, {self.vocab})")
        if len(prompt) >= self.max_len:
            raise ValueError(f"the prompt has {len(prompt)} tokens; this model's context is "
                             f"{self.max_len}")
        max_tokens = max(0, min(max_tokens, self.max_len - len(prompt)))
        k = None if logprobs is None else max(1, logprobs)
        scored: list[tuple[str | None, float | None, dict[str, float] | None]] = []
        gen: list[int] = []
        text, finish, n_eos = "", "length", 0
        rng = torch.Generator().manual_seed(int(seed)) if seed is not None else None
        with self.lock, torch.inference_mode():
            start = time.monotonic()  # compute time, not the wait for the lock
            scoring = echo and k is not None
            out = self.model(input_ids=torch.tensor([prompt]), use_cache=True,
                             logits_to_keep=0 if scoring else 1)
            if scoring:
                assert k is not None
                lps = torch.log_softmax(out.logits[0, :-1].float(), dim=-1)
                scored.append((self.decode(prompt[:1]), None, None))
                scored += [self._entry(lps[i], t, k) for i, t in enumerate(prompt[1:])]
            n_echo = len(scored)
            logits, past = out.logits[0, -1].float(), out.cache
            for step in range(max_tokens):
                lp = torch.log_softmax(logits, dim=-1)
                token = int(lp.argmax()) if temperature <= 0 else \
                    self._sample(logits / temperature, top_p, rng)
                if k is not None:  # an EOS is scored too (as vLLM does), but not returned
                    scored.append(self._entry(lp, token, k))
                if token in self.eos:
                    finish, n_eos = "stop", 1
                    break
                gen.append(token)
                text = self.decode(gen, skip_special=True)
                cut = min((text.index(s) for s in stops or [] if s and s in text), default=None)
                if cut is not None:
                    text, finish = text[:cut], "stop"
                    while gen and not text.startswith(self.decode(gen, skip_special=True)):
                        gen.pop()  # logprobs only for the tokens inside the returned text
                    del scored[n_echo + len(gen):]
                    break
                if step + 1 < max_tokens:
                    out = self.model(input_ids=torch.tensor([[token]]), cache=past,
                                     use_cache=True)
                    logits, past = out.logits[0, -1].float(), out.cache
        result = Output(self.decode(prompt) + text if echo else text, finish, len(prompt),
                        len(gen) + n_eos, seconds=time.monotonic() - start)
        if k is not None:
            offsets = list(accumulate((len(e[0] or "") for e in scored), initial=0))[:-1]
            tokens, token_lps, tops = (list(column) for column in zip(*scored, strict=True))
            result.logprobs = {"tokens": tokens, "token_logprobs": token_lps,
                               "top_logprobs": tops, "text_offset": offsets}
        return result

    @staticmethod
    def _sample(logits: torch.Tensor, top_p: float, rng: torch.Generator | None) -> int:
        probs = torch.softmax(logits, dim=-1)
        if top_p < 1.0:
            sorted_p, order = probs.sort(descending=True)
            drop = sorted_p.cumsum(0) - sorted_p > top_p
            probs = probs.scatter(0, order[drop], 0.0)
        return int(torch.multinomial(probs / probs.sum(), 1, generator=rng))


def _stops(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else [str(s) for s in value or []]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: lm-eval pools its connections
    server: ModelServer

    def setup(self) -> None:
        super().setup()  # headers and body go out in two writes: no Nagle wait between them
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            super().log_message(format, *args)

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        self._send(status, {"error": {"message": message, "type": kind, "code": status}})

    def do_GET(self) -> None:
        srv, eng = self.server, self.server.engine
        if self.path == "/health":
            self._send(200, {"status": "ok"})
        elif self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [{
                "id": srv.name, "object": "model", "created": srv.started, "owned_by": "hpceval",
                "root": str(srv.model_dir), "max_model_len": eng.max_len}]})
        elif self.path == "/tokenizer_info":
            tok = eng.tok
            self._send(200, {"tokenizer_class": type(tok).__name__, "model_max_length": eng.max_len,
                             "chat_template": tok.chat_template,
                             **{f"{n}_token": getattr(tok, f"{n}_token") for n in SPECIALS}})
        else:
            self._error(404, f"no route {self.path}")

    def do_POST(self) -> None:
        routes = {"/v1/completions": self._completions, "/v1/chat/completions": self._chat,
                  "/tokenize": self._tokenize, "/detokenize": self._detokenize}
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0))
                              or b"{}")
            route = routes.get(self.path)
            if route is None:
                self._error(404, f"no route {self.path}")
            elif body.get("model") not in (None, self.server.name, str(self.server.model_dir)):
                self._error(404, f"The model `{body['model']}` does not exist.", "NotFoundError")
            elif body.get("stream") or (body.get("n") or 1) != 1:
                self._error(400, "this server does not stream and returns one choice (n=1)")
            else:
                route(body)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            self._error(400, f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # keep serving; the client sees what broke
            self._error(500, f"{type(exc).__name__}: {exc}", "InternalServerError")

    def _prompts(self, prompt: Any) -> list[list[int]]:
        eng = self.server.engine
        if isinstance(prompt, str):
            return [eng.encode(prompt, special=True)]
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            return [list(prompt)]
        if isinstance(prompt, list) and prompt:
            return [p if isinstance(p, list) else eng.encode(str(p), special=True) for p in prompt]
        raise ValueError("prompt must be a string, a list of strings, token ids or lists of them")

    def _usage(self, kind: str, outs: list[Output]) -> dict[str, int]:
        for o in outs:  # one log line per request: throughput in the server log
            print(f"{kind}: prompt {o.n_prompt} tok, generated {o.n_gen} tok in {o.seconds:.2f} s"
                  f" ({o.n_gen / max(o.seconds, 1e-9):.1f} tok/s), {o.finish}", flush=True)
        p, g = sum(o.n_prompt for o in outs), sum(o.n_gen for o in outs)
        return {"prompt_tokens": p, "completion_tokens": g, "total_tokens": p + g}

    def _completions(self, body: dict[str, Any]) -> None:
        eng, logprobs = self.server.engine, body.get("logprobs")
        outs = []
        for ids in self._prompts(body["prompt"]):
            limit = body.get("max_tokens")
            out = eng.run(ids, 16 if limit is None else int(limit),
                          float(body.get("temperature") or 0.0), float(body.get("top_p") or 1.0),
                          _stops(body.get("stop")), None if logprobs is None else int(logprobs),
                          bool(body.get("echo")), body.get("seed"))
            outs.append(out)
        self._send(200, {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion",
                         "created": int(time.time()), "model": self.server.name,
                         "choices": [{"index": i, "text": o.text, "logprobs": o.logprobs,
                                      "finish_reason": o.finish} for i, o in enumerate(outs)],
                         "usage": self._usage("completion", outs)})

    def _chat(self, body: dict[str, Any]) -> None:
        eng = self.server.engine
        ids = eng.encode(eng.chat_prompt(list(body["messages"])))
        limit = body.get("max_completion_tokens") or body.get("max_tokens") or eng.max_len
        out = eng.run(ids, int(limit), float(body.get("temperature") or 0.0),
                      float(body.get("top_p") or 1.0), _stops(body.get("stop")),
                      seed=body.get("seed"))
        self._send(200, {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
                         "created": int(time.time()), "model": self.server.name,
                         "choices": [{"index": 0, "finish_reason": out.finish, "logprobs": None,
                                      "message": {"role": "assistant", "content": out.text}}],
                         "usage": self._usage("chat", [out])})

    def _tokenize(self, body: dict[str, Any]) -> None:
        eng = self.server.engine
        tokens = eng.encode(eng.chat_prompt(list(body["messages"]),
                                            bool(body.get("add_generation_prompt", True)))) \
            if "messages" in body else \
            eng.encode(str(body["prompt"]), bool(body.get("add_special_tokens", True)))
        self._send(200, {"tokens": tokens, "count": len(tokens), "max_model_len": eng.max_len,
                         "token_strs": None})

    def _detokenize(self, body: dict[str, Any]) -> None:
        self._send(200, {"prompt": self.server.engine.decode([int(t) for t in body["tokens"]])})


class ModelServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host: str, port: int, engine: Engine, model_dir: Path, name: str,
                 verbose: bool = False) -> None:
        super().__init__((host, port), Handler)
        self.engine, self.model_dir, self.name, self.verbose = engine, model_dir, name, verbose
        self.started = int(time.time())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path, help="an HF model directory (prepare.py)")
    parser.add_argument("--host", default="127.0.0.1", help="0.0.0.0 to serve other nodes")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT") or 8000),
                        help="default: $PORT (set by hpceval's command deployment), else 8000")
    parser.add_argument("--model", help="served model name (default: the directory's name)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (2)")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                        help="weights precision: the demo compares the two")
    parser.add_argument("--port-file", type=Path, help="write the bound port here when ready")
    parser.add_argument("--verbose", action="store_true", help="log every HTTP request")
    args = parser.parse_args(argv)
    start = time.monotonic()
    model_dir = args.model_dir.expanduser().resolve()
    engine = Engine(model_dir, args.threads, args.dtype)
    server = ModelServer(args.host, args.port, engine, model_dir, args.model or model_dir.name,
                         args.verbose)
    signal.signal(signal.SIGTERM,
                  lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    if args.port_file:  # renamed into place: a reader never sees it half written
        tmp = args.port_file.with_name(f".{args.port_file.name}.{os.getpid()}")
        tmp.write_text(f"{server.server_address[1]}\n", encoding="utf-8")
        os.replace(tmp, args.port_file)
    print(f"serving {model_dir} as {server.name!r} on http://{args.host}:"
          f"{server.server_address[1]} (loaded in {time.monotonic() - start:.1f} s)", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
