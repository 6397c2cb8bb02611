"""OpenAI-compatible judge endpoints for the tests: real HTTP servers on loopback.

* :class:`RuleJudge` judges for real by a rule: YES when the last number of the solution equals
  the reference's (the prompt is roll's ``yes_no`` template), and refuses a wrong bearer key;
* :class:`TinyModelJudge` serves roll's tiny random model through ``hf_infer``: what it says is
  not a verdict (garbage), which is what a broken judge looks like.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class JudgeServer:
    def __init__(self, key: str | None = None):
        self.key = key
        self.requests: list[dict[str, Any]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if owner.key is not None and self.headers.get("Authorization") != f"Bearer {owner.key}":
                    self.send_response(401)
                    self.end_headers()
                    # a careless server echoes what it was sent: the client must not print it
                    self.wfile.write(str(self.headers.get("Authorization")).encode())
                    return
                owner.requests.append(body)
                text = owner.reply(body["messages"][-1]["content"])
                payload = {"choices": [{"message": {"role": "assistant", "content": text}}]}
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def reply(self, prompt: str) -> str:
        raise NotImplementedError

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class RuleJudge(JudgeServer):
    def reply(self, prompt: str) -> str:
        solution = prompt.split("Solution:", 1)[1].split("Reference answer:", 1)[0]
        reference = prompt.split("Reference answer:", 1)[1].split("Verdict:", 1)[0].strip()
        numbers = re.findall(r"-?\d+", solution)
        return "YES" if numbers and numbers[-1] == reference else "NO"


class TinyModelJudge(JudgeServer):
    def __init__(self, key: str | None = None):
        from roll_core.models import load_tokenizer, resolve_pretrain
        from roll_core.strategies.hf_infer import HFInferStrategy

        self.strategy = HFInferStrategy("roll-tiny", seed=0)
        self.tokenizer = load_tokenizer(resolve_pretrain("roll-tiny", seed=0))
        self.lock = threading.Lock()
        super().__init__(key)

    def reply(self, prompt: str) -> str:
        from roll_core.strategies.base import GenerationRequest, SamplingParams

        ids = self.tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                                 tokenize=True)
        ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        with self.lock:
            out = self.strategy.generate([GenerationRequest("j", ids, SamplingParams(max_new_tokens=6,
                                                                                     temperature=0.0))])[0]
        return self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
