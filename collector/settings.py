"""Command-line flags and environment variables → frozen settings.

Every setting has a flag and a ``GPUSCALE_COLLECTOR_*`` environment variable; where dcgm-exporter has the same
setting, its flag spelling and its environment variable work too, so a DaemonSet can switch images without changing
its arguments. Precedence: flag, then our variable, then dcgm-exporter's variable, then the default.
"""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ENV_PREFIX = "GPUSCALE_COLLECTOR_"
DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"

# dcgm-exporter flags that configure DCGM itself or features this collector does not have. They are accepted so
# existing manifests keep working, and each one given is named in a log line at start.
IGNORED_DCGM_FLAGS: dict[tuple[str, ...], str] = {
    ("-r", "--remote-hostengine-info"): "DCGM_REMOTE_HOSTENGINE_INFO",
    ("-o", "--use-old-namespace"): "DCGM_EXPORTER_USE_OLD_NAMESPACE",
    ("-d", "--devices"): "DCGM_EXPORTER_DEVICES_STR",
    ("-s", "--switch-devices"): "DCGM_EXPORTER_OTHER_DEVICES_STR",
    ("-p", "--cpu-devices"): "DCGM_EXPORTER_CPU_DEVICES_STR",
    ("-m", "--configmap-data"): "DCGM_EXPORTER_CONFIGMAP_DATA",
    ("-x", "--xid-count-window-size"): "DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE",
    ("--clock-events-count-window-size",): "DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE",
    ("--enable-dcgm-log",): "DCGM_EXPORTER_ENABLE_DCGM_LOG",
    ("--dcgm-log-level",): "DCGM_EXPORTER_DCGM_LOG_LEVEL",
    ("--fake-gpus",): "DCGM_EXPORTER_USE_FAKE_GPUS",
    ("--config-file",): "DCGM_EXPORTER_CONFIG_FILE",
    ("--kubernetes-enable-pod-labels",): "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS",
    ("--kubernetes-enable-pod-uid",): "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID",
    ("--hpc-job-mapping-dir",): "DCGM_HPC_JOB_MAPPING_DIR",
    ("--web-read-timeout",): "DCGM_EXPORTER_WEB_READ_TIMEOUT",
    ("--web-write-timeout",): "DCGM_EXPORTER_WEB_WRITE_TIMEOUT",
    ("--web-systemd-socket",): "",
    ("--container-labels",): "DCGM_EXPORTER_CONTAINER_LABELS",
    ("--kubernetes-enable-dra",): "KUBERNETES_ENABLE_DRA",
}
_BOOLEAN_IGNORED = {
    "--use-old-namespace",
    "--enable-dcgm-log",
    "--fake-gpus",
    "--kubernetes-enable-pod-labels",
    "--kubernetes-enable-pod-uid",
    "--web-systemd-socket",
    "--container-labels",
    "--kubernetes-enable-dra",
}


@dataclass(frozen=True)
class Settings:
    collectors: str | None
    host: str
    port: int
    interval: float
    slow_interval: float
    kubernetes: bool
    gpu_id_type: str
    pod_resources_socket: str
    pod_resources_refresh: float
    pod_resources_timeout: float
    shared_window: float
    proc_root: str
    kubeconfig: str | None
    node_name: str
    resource_names: tuple[str, ...]
    virtual_gpus: bool
    hostname: str | None
    replace_blanks: bool
    simulate_gpus: int
    simulate_spec: str | None
    fallback_simulated_gpus: int
    debug: bool
    log_format: str
    ignored: tuple[str, ...]


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _int_range(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number from {low} to {high}, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, got {value}")
        return value

    return parse


def parse_address(text: str) -> tuple[str, int]:
    """``:9400``, ``0.0.0.0:9400``, ``[::]:9400`` → (host, port); an empty host listens everywhere."""
    host, sep, port_text = text.rpartition(":")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected <host>:<port> such as :9400, got {text!r}")
    port = _int_range(1, 65535)(port_text)
    return host.strip("[]"), port


class _Builder:
    def __init__(self, parser: argparse.ArgumentParser, env: Mapping[str, str]) -> None:
        self.parser = parser
        self.env = env

    def add(
        self,
        *flags: str,
        default: Any,
        help: str,
        type: Callable[[str], Any] | None = None,
        dcgm_env: str | None = None,
        flag_only_bool: bool = False,
    ) -> None:
        long = next(f for f in flags if f.startswith("--"))
        ours = ENV_PREFIX + long[2:].upper().replace("-", "_")
        names = [ours] + ([dcgm_env] if dcgm_env else [])
        value = default
        for name in names:
            if name in self.env:
                raw = self.env[name]
                try:
                    value = (type or str)(raw)
                except argparse.ArgumentTypeError as e:
                    self.parser.error(f"environment variable {name}: {e}")
                break
        env_note = ", ".join(f"${n}" for n in names)
        text = f"{help} [env {env_note}; default {default!r}]"
        if flag_only_bool:
            self.parser.add_argument(
                *flags, nargs="?", const=True, default=value, type=_bool, help=text, metavar="BOOL"
            )
        else:
            self.parser.add_argument(*flags, default=value, type=type or str, help=text)


def build_parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuscale-collector",
        description="Export NVIDIA GPU metrics to Prometheus (dcgm-exporter compatible, no DCGM needed).",
    )
    b = _Builder(parser, env)
    b.add(
        "-f", "--collectors", default=None, dcgm_env="DCGM_EXPORTER_COLLECTORS",
        help="counters file (dcgm-exporter CSV format); the built-in file when unset",
    )  # fmt: skip
    b.add(
        "-a", "--address", default=":9400", type=parse_address, dcgm_env="DCGM_EXPORTER_LISTEN",
        help="listen address <host>:<port>",
    )  # fmt: skip
    b.add(
        "-c", "--collect-interval", default=1000, type=_int_range(100, 3_600_000), dcgm_env="DCGM_EXPORTER_INTERVAL",
        help="collection interval in milliseconds",
    )  # fmt: skip
    b.add(
        "--slow-fields-interval", default=10000, type=_int_range(100, 3_600_000),
        help="interval in milliseconds for fields that change slowly (energy, ECC, remapped rows, PCIe replays, "
        "power limit); their last values are served in between",
    )  # fmt: skip
    b.add(
        "-k", "--kubernetes", default=False, type=_bool, flag_only_bool=True, dcgm_env="DCGM_EXPORTER_KUBERNETES",
        help="attach pod, namespace and container labels from the kubelet",
    )  # fmt: skip
    b.add(
        "--kubernetes-gpu-id-type", default="uid", dcgm_env="DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE",
        type=_choice("uid", "device-name"),
        help="how the kubelet names GPUs: uid (GPU UUIDs) or device-name (nvidiaN); both are recognised anyway",
    )  # fmt: skip
    b.add(
        "--pod-resources-kubelet-socket", default=DEFAULT_SOCKET, dcgm_env="DCGM_POD_RESOURCES_KUBELET_SOCKET",
        help="kubelet pod-resources socket",
    )  # fmt: skip
    b.add(
        "--pod-resources-refresh", default=1000, type=_int_range(100, 600_000),
        help="how often the pod-resources map is refreshed, in milliseconds (in the background, never per scrape)",
    )  # fmt: skip
    b.add(
        "--pod-resources-timeout", default=2000, type=_int_range(100, 60_000),
        help="timeout of one pod-resources call, in milliseconds",
    )  # fmt: skip
    b.add(
        "--shared-window", default=10000, type=_int_range(2000, 600_000),
        help="window in milliseconds over which a shared GPU's utilization is split by pod; shorter is noisier",
    )  # fmt: skip
    b.add(
        "--proc-root", default="/proc",
        help="where processes' cgroup files are read to find their pods (needs hostPID for shared GPUs)",
    )  # fmt: skip
    b.add(
        "--kubeconfig", default="",
        help="kubeconfig for naming pods of shared GPUs; in-cluster configuration when empty and in a pod",
    )  # fmt: skip
    b.add(
        "--nvidia-resource-names", default="", dcgm_env="NVIDIA_RESOURCE_NAMES",
        help="extra comma-separated resource names that carry GPUs (nvidia.com/gpu, nvidia.com/gpu.shared and "
        "nvidia.com/mig-* are always recognised)",
    )  # fmt: skip
    b.add(
        "--kubernetes-virtual-gpus", default=False, type=_bool, flag_only_bool=True, dcgm_env="KUBERNETES_VIRTUAL_GPUS",
        help="accepted for compatibility: shared (time-sliced or MPS) GPUs are always attributed per pod",
    )  # fmt: skip
    b.add(
        "-n", "--no-hostname", default=False, type=_bool, flag_only_bool=True, dcgm_env="DCGM_EXPORTER_NO_HOSTNAME",
        help="leave out the Hostname label",
    )  # fmt: skip
    b.add(
        "-rbmn", "--replace-blanks-in-model-name", default=False, type=_bool, flag_only_bool=True,
        dcgm_env="DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME", help="replace spaces in modelName with dashes",
    )  # fmt: skip
    b.add(
        "--simulate-gpus", default=0, type=_int_range(0, 64),
        help="serve N simulated H200-like GPUs instead of reading NVML (for machines without a GPU)",
    )  # fmt: skip
    b.add(
        "--simulate-spec", default="",
        help="serve simulated GPUs described by this YAML file (count, MIG, processes, a load script)",
    )  # fmt: skip
    b.add(
        "--fallback-simulated-gpus", default=0, type=_int_range(0, 64),
        help="when NVML cannot start, serve N simulated GPUs instead of waiting for it (local runs and demos)",
    )  # fmt: skip
    b.add(
        "--debug", default=False, type=_bool, flag_only_bool=True, dcgm_env="DCGM_EXPORTER_DEBUG",
        help="log at debug level",
    )  # fmt: skip
    b.add(
        "--log-format", default="text", type=_choice("text", "json"), dcgm_env="DCGM_EXPORTER_LOG_FORMAT",
        help="log format",
    )  # fmt: skip
    b.add(
        "--web-config-file", default="", dcgm_env="DCGM_EXPORTER_WEB_CONFIG_FILE",
        help="Prometheus web-config file (TLS and basic auth on /metrics)",
    )  # fmt: skip
    ignored = parser.add_argument_group("dcgm-exporter flags accepted and ignored (they configure DCGM itself)")
    for flags in IGNORED_DCGM_FLAGS:
        long = next(f for f in flags if f.startswith("--"))
        if long in _BOOLEAN_IGNORED:
            ignored.add_argument(*flags, nargs="?", const="true", default=None, help=argparse.SUPPRESS)
        else:
            ignored.add_argument(*flags, default=None, help=argparse.SUPPRESS)
    return parser


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in allowed:
            raise argparse.ArgumentTypeError(f"must be one of {', '.join(allowed)}, got {text!r}")
        return text

    return parse


def parse_settings(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if env is None else env
    parser = build_parser(env)
    args = parser.parse_args(argv)
    if args.web_config_file:
        parser.error(
            "--web-config-file: TLS and basic auth on /metrics are not supported yet; serve it plainly "
            "inside the cluster network or put a proxy in front"
        )
    host, port = args.address
    ignored = []
    for flags, env_name in IGNORED_DCGM_FLAGS.items():
        dest = next(f for f in flags if f.startswith("--"))[2:].replace("-", "_")
        if getattr(args, dest) is not None or (env_name and env_name in env):
            ignored.append(flags[-1])
    names = tuple(n.strip() for n in args.nvidia_resource_names.split(",") if n.strip())
    hostname = None if args.no_hostname else (env.get("NODE_NAME") or socket.gethostname())
    return Settings(
        collectors=args.collectors or None,
        host=host,
        port=port,
        interval=args.collect_interval / 1000.0,
        slow_interval=args.slow_fields_interval / 1000.0,
        kubernetes=args.kubernetes,
        gpu_id_type=args.kubernetes_gpu_id_type,
        pod_resources_socket=args.pod_resources_kubelet_socket,
        pod_resources_refresh=args.pod_resources_refresh / 1000.0,
        pod_resources_timeout=args.pod_resources_timeout / 1000.0,
        shared_window=args.shared_window / 1000.0,
        proc_root=args.proc_root,
        kubeconfig=args.kubeconfig or None,
        node_name=env.get("NODE_NAME") or socket.gethostname(),
        resource_names=names,
        virtual_gpus=args.kubernetes_virtual_gpus,
        hostname=hostname,
        replace_blanks=args.replace_blanks_in_model_name,
        simulate_gpus=args.simulate_gpus,
        simulate_spec=args.simulate_spec or None,
        fallback_simulated_gpus=args.fallback_simulated_gpus,
        debug=args.debug,
        log_format=args.log_format,
        ignored=tuple(ignored),
    )
