"""The series the integration tests load into a real Prometheus, and a tiny exporter serving them for scraping.

The collector's dcgm-exporter-compatible series, as a cluster would have them: pods with one or two GPUs, a pod
whose value is NaN, a stale pod Kubernetes no longer has, a shared GPU (device-wide series plus one per pod), a series
scraped without honorLabels (exported_pod/exported_namespace), and label values that try to break PromQL quoting.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GPU = "DCGM_FI_DEV_GPU_UTIL"
FB = "DCGM_FI_DEV_FB_USED"
TENSOR = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"

# label values with PromQL/regex metacharacters; the exposition format escapes \, " and newline
WEIRD_PODS = ["a.b", "aXb", 'we"ird', "back\\slash", "pipe|x", "pipe", "x", "brace}", "dot.*", "new\nline"]


def _labels(**labels: str) -> str:
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in labels.items()) + "}"


def _gpu(uuid: str, gpu: str, host: str, **more: str) -> dict[str, str]:
    return {"gpu": gpu, "UUID": uuid, "Hostname": host, "modelName": "NVIDIA H200", **more}


LINES: list[tuple[str, dict[str, str], str]] = [
    # node-a: trainer-0 has two GPUs (95.5, 80.5 → 88), trainer-1 one (40)
    (GPU, _gpu("GPU-a0", "0", "node-a", pod="trainer-0", namespace="ml", container="main"), "95.5"),
    (GPU, _gpu("GPU-a1", "1", "node-a", pod="trainer-0", namespace="ml", container="main"), "80.5"),
    (GPU, _gpu("GPU-a2", "2", "node-a", pod="trainer-1", namespace="ml", container="main"), "40"),
    # node-b: other-0 (not app=trainer) and trainer-9, a pod Kubernetes no longer has
    (GPU, _gpu("GPU-b0", "0", "node-b", pod="other-0", namespace="ml"), "10"),
    (GPU, _gpu("GPU-b2", "2", "node-b", pod="trainer-9", namespace="ml"), "99"),
    # node-c: infer-0 scraped without honorLabels; GPU-c1 shared by two pods (device-wide 88, shares 70 and 18)
    (
        GPU,
        _gpu(
            "GPU-c0",
            "0",
            "node-c",
            exported_pod="infer-0",
            exported_namespace="serving",
            pod="dcgm-x",
            namespace="gpu-system",
        ),
        "70",
    ),
    (GPU, _gpu("GPU-c1", "1", "node-c"), "88"),
    (GPU, _gpu("GPU-c1", "1", "node-c", pod="share-a", namespace="ml"), "70"),
    (GPU, _gpu("GPU-c1", "1", "node-c", pod="share-b", namespace="ml"), "18"),
    # node-d: a GPU reading NaN
    (GPU, _gpu("GPU-d0", "0", "node-d", pod="broken-0", namespace="ml"), "NaN"),
    (FB, _gpu("GPU-a0", "0", "node-a", pod="trainer-0", namespace="ml"), "40960"),
    (FB, _gpu("GPU-a1", "1", "node-a", pod="trainer-0", namespace="ml"), "1024"),
    (FB, _gpu("GPU-a2", "2", "node-a", pod="trainer-1", namespace="ml"), "1500"),
    (
        FB,
        _gpu(
            "GPU-c0",
            "0",
            "node-c",
            exported_pod="infer-0",
            exported_namespace="serving",
            pod="dcgm-x",
            namespace="gpu-system",
        ),
        "8192",
    ),
    (TENSOR, _gpu("GPU-a0", "0", "node-a", pod="trainer-0", namespace="ml"), "0.928"),
    (TENSOR, _gpu("GPU-a1", "1", "node-a", pod="trainer-0", namespace="ml"), "0.5"),
    ("queue_depth", {"queue": "jobs", "namespace": "ml"}, "42"),
    ("queue_depth", {"queue": "mail", "namespace": "ml"}, "7"),
    ("queue_depth", {"queue": "jobs", "namespace": "other"}, "5"),
    ("big_value", {"pod": "trainer-0", "namespace": "ml"}, "12345678901234567890"),
    ("tiny_value", {"pod": "trainer-0", "namespace": "ml"}, "0.0001"),
    ("inf_value", {"pod": "trainer-0", "namespace": "ml"}, "+Inf"),
    *(("weird_value", {"pod": p, "namespace": "ml"}, str(i + 1)) for i, p in enumerate(WEIRD_PODS)),
]


def exposition(lines: list[tuple[str, dict[str, str], str]] = LINES) -> str:
    names = dict.fromkeys(name for name, _, _ in lines)
    out = [f"# TYPE {name} gauge" for name in names]
    out += [f"{name}{_labels(**labels)} {value}" for name, labels, value in lines]
    return "\n".join(out) + "\n"


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        # a scraper that gave up on a page hangs up mid-write; that is the scraper's timeout, not an exporter fault
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


class Exporter:
    """Serves ``text`` on /metrics from a thread (Prometheus scrapes it while tests block or await); a callable
    ``text`` is called for each scrape (counters that grow with time). ``negotiate``, when given, answers instead:
    from the scraper's Accept header, the body and its content type (a page in the format the scraper asked for)."""

    def __init__(
        self, text: str | Callable[[], str], negotiate: Callable[[str], tuple[bytes, str]] | None = None
    ) -> None:
        self.text = text
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if negotiate is not None:
                    body, content_type = negotiate(self.headers.get("Accept", ""))
                else:
                    body = (exporter.text if isinstance(exporter.text, str) else exporter.text()).encode()
                    content_type = "text/plain; version=0.0.4"
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> Exporter:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
