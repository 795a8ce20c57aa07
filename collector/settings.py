"""Command-line flags and environment variables → frozen settings.

Every setting has a flag and a ``GPUSCALE_COLLECTOR_*`` environment variable; where dcgm-exporter has the same
setting, its flag spelling and its environment variable work too, so a DaemonSet can switch images without changing
its arguments. Precedence: flag, then our variable, then dcgm-exporter's variable, then the default.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from collector.counters.configmap import ConfigMapRef, parse_configmap_ref
from collector.errors import ConfigError
from collector.pods.labels import Pattern, parse_allowlist
from common.flags import (
    FlagError,
    FlagTable,
    boolean,
    choice,
    duration,
    flag,
    integer,
    milliseconds,
    optional_text,
    string_list,
    usage_error,
)

if TYPE_CHECKING:
    from collector.config_file import ConfigFile


def parse_address(text: str) -> tuple[str, int]:
    """``:9400``, ``0.0.0.0:9400``, ``[::]:9400`` → (host, port); an empty host listens everywhere."""
    host, sep, port_text = text.rpartition(":")
    if not sep:
        raise ValueError(f"expected <host>:<port> such as :9400, got {text!r}")
    return host.strip("[]"), integer(1, 65535)(port_text)


def remote_host(text: str) -> str:
    """The host of ``-r <host>:<port>`` (``[::1]:5555`` → ``::1``); the whole text when it does not split into a
    host and a port, as dcgm-exporter reads it (Go's net.SplitHostPort, falling back to the text)."""
    colon = text.rfind(":")
    if colon < 0:
        return text
    if text.startswith("["):
        end = text.find("]")
        return text[1:end] if end + 1 == colon else text
    host = text[:colon]
    return text if ":" in host or "[" in host or "]" in host else host


_DCGM = "configures DCGM itself, which is not used: GPUs are read through NVML"
_NO_DCGM_LOG = "no DCGM library is loaded, so there is no DCGM log to write; --debug sets this collector's own log"

FLAGS = FlagTable(
    "gpuscale-collector",
    "Export NVIDIA GPU metrics to Prometheus (dcgm-exporter compatible, no DCGM needed).",
    "GPUSCALE_COLLECTOR_",
    [
        flag("-f", "--collectors", field="collectors", parse=optional_text, env=("DCGM_EXPORTER_COLLECTORS",),
             help="counters file (dcgm-exporter CSV format); when unset, /etc/dcgm-exporter/default-counters.csv "
             "if that file exists (dcgm-exporter's default), else the built-in file"),
        flag("--config-file", field="config_file", parse=optional_text, env=("DCGM_EXPORTER_CONFIG_FILE",),
             help="dcgm-exporter's YAML configuration file (version 1 or 2): the counters (metrics.file or "
             "metrics.fields), the collection interval and the GPU bind/unbind watch; a flag or variable given "
             "for the same setting wins, and -f or -m replaces its counters"),
        flag("--dcgm-names", field="dcgm_names", parse=choice("4.10", "pre-4.9"), default="4.10",
             help="names and units of the built-in default counters: 4.10 (dcgm-exporter 4.9 and 4.10, DCGM 4.7/4.8: "
             "DCGM_FI_DEV_GPU_UTIL_RATIO 0-1, clocks in Hz, memory in bytes, energy in J) or pre-4.9 (dcgm-exporter "
             "4.8 and earlier: DCGM_FI_DEV_GPU_UTIL in %%, MHz, MiB, mJ); a counters file or ConfigMap names its own"),
        flag("-m", "--configmap-data", field="configmap", parse=parse_configmap_ref, default="none",
             env=("DCGM_EXPORTER_CONFIGMAP_DATA",), help="read the counters from the 'metrics' key of the "
             "ConfigMap <namespace>:<name> through the Kubernetes API instead of a file (needs 'get' on it); "
             "'none': from the file"),
        flag("--configmap-refresh", field="configmap_refresh", parse=milliseconds(0, 86_400_000), default="60000",
             help="how often the -m ConfigMap is read again, in milliseconds (0: only on SIGHUP); a change is "
             "applied between two collections"),
        flag("-o", "--use-old-namespace", field="old_namespace", parse=boolean, default="false", switch=True,
             env=("DCGM_EXPORTER_USE_OLD_NAMESPACE",), help="dcgm-exporter 1.x label names: uuid instead of UUID, "
             "pod_name, pod_namespace, container_name instead of pod, namespace, container"),
        flag("-a", "--address", field="address", parse=parse_address, default=":9400",
             env=("DCGM_EXPORTER_LISTEN",), help="listen address <host>:<port>"),
        flag("-c", "--collect-interval", field="interval", parse=milliseconds(100, 3_600_000), default="1000",
             env=("DCGM_EXPORTER_INTERVAL",), help="collection interval in milliseconds"),
        flag("--slow-fields-interval", field="slow_interval", parse=milliseconds(100, 3_600_000), default="10000",
             help="interval in milliseconds for fields that change slowly (energy, ECC, remapped rows, PCIe "
             "replays, power limit) or that NVML answers slowly (PCIe throughput); their last values are served "
             "in between"),
        flag("--engine-utilization-interval", field="engine_interval", parse=milliseconds(100, 3_600_000),
             default="5000",
             help="span in milliseconds of DCGM_FI_DEV_MEM_COPY_UTIL, _ENC_UTIL and _DEC_UTIL, each the mean of "
             "NVML's samples over it and read once per span (DCGM_FI_DEV_GPU_UTIL spans the collection interval); "
             "a value below the collection interval is taken as the collection interval"),
        flag("-k", "--kubernetes", field="kubernetes", parse=boolean, default="false", switch=True,
             env=("DCGM_EXPORTER_KUBERNETES",), help="attach pod, namespace and container labels from the kubelet"),
        flag("--pod-resources-kubelet-socket", field="pod_resources_socket",
             default="/var/lib/kubelet/pod-resources/kubelet.sock", env=("DCGM_POD_RESOURCES_KUBELET_SOCKET",),
             help="kubelet pod-resources socket"),
        flag("--pod-resources-refresh", field="pod_resources_refresh", parse=milliseconds(100, 600_000),
             default="1000", help="how often the pod-resources map is refreshed, in milliseconds (in the "
             "background, never per scrape)"),
        flag("--pod-resources-timeout", field="pod_resources_timeout", parse=milliseconds(100, 60_000),
             default="2000", help="timeout of one pod-resources call, in milliseconds"),
        flag("--shared-window", field="shared_window", parse=milliseconds(2000, 600_000), default="10000",
             help="window in milliseconds over which a shared GPU's utilization is split by pod; shorter is noisier"),
        flag("--proc-root", field="proc_root", default="/proc",
             help="where processes' cgroup files are read to find their pods (needs hostPID for shared GPUs)"),
        flag("--kubeconfig", field="kubeconfig", parse=optional_text,
             help="kubeconfig for naming pods of shared GPUs; in-cluster configuration when empty and in a pod"),
        flag("--kubernetes-enable-pod-labels", field="pod_labels", parse=boolean, default="false", switch=True,
             env=("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS",), help="with -k, the owning pod's Kubernetes labels "
             "on its GPU series, names sanitised (app.kubernetes.io/name → app_kubernetes_io_name)"),
        flag("--kubernetes-pod-label-allowlist-regex", field="pod_label_allowlist", parse=parse_allowlist,
             default="", env=("DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX",), repeated=True,
             help="comma-separated regular expressions; only pod label keys one of them matches are kept (empty: "
             "all)"),
        flag("--kubernetes-enable-pod-uid", field="pod_uid", parse=boolean, default="false", switch=True,
             env=("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID",), help="with -k, a pod_uid label on pod-owned series"),
        flag("--kubernetes-enable-dra", field="dra", parse=boolean, default="false", switch=True,
             env=("KUBERNETES_ENABLE_DRA",), help="with -k, attach pods to GPUs they hold through Dynamic Resource "
             "Allocation claims (kubelet pod-resources and this node's ResourceSlices)"),
        flag("--hpc-job-mapping-dir", field="hpc_job_mapping_dir", parse=optional_text,
             env=("DCGM_HPC_JOB_MAPPING_DIR",), help="directory of files named by GPU index (or <gpu>.<GPU "
             "instance>) listing job IDs one a line; each job becomes an hpc_job label, re-read on change"),
        flag("--nvidia-resource-names", field="resource_names", parse=string_list, default="",
             env=("NVIDIA_RESOURCE_NAMES",), repeated=True, help="extra comma-separated resource names that carry GPUs "
             "(nvidia.com/gpu, nvidia.com/gpu.shared and nvidia.com/mig-* are always recognised)"),
        flag("-r", "--remote-hostengine-info", field="remote_hostengine", parse=optional_text,
             env=("DCGM_REMOTE_HOSTENGINE_INFO",), help="dcgm-exporter's remote DCGM host engine <host>:<port>; "
             "GPUs are still read through this machine's NVML, and without -k the host label is <host>, as "
             "dcgm-exporter sets it"),
        flag("--hostname-label", field="hostname_label", parse=choice("Hostname", "hostname"), default="Hostname",
             help="name of the label that carries the host name: Hostname (dcgm-exporter up to 4.8) or hostname "
             "(its spelling after that)"),
        flag("-n", "--no-hostname", field="no_hostname", parse=boolean, default="false", switch=True,
             env=("DCGM_EXPORTER_NO_HOSTNAME",), help="leave out the Hostname label"),
        flag("-rbmn", "--replace-blanks-in-model-name", field="replace_blanks", parse=boolean, default="false",
             switch=True, env=("DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME",),
             help="replace spaces in modelName with dashes"),
        flag("--simulate-gpus", field="simulate_gpus", parse=integer(0, 64), default="0",
             help="serve N simulated H200-like GPUs instead of reading NVML (for machines without a GPU)"),
        flag("--simulate-spec", field="simulate_spec", parse=optional_text,
             help="serve simulated GPUs described by this YAML file (count, MIG, processes, a load script)"),
        flag("--fallback-simulated-gpus", field="fallback_simulated_gpus", parse=integer(0, 64), default="0",
             help="when NVML cannot start, serve N simulated GPUs instead of waiting for it (local runs and demos)"),
        flag("--debug", field="debug", parse=boolean, default="false", switch=True, env=("DCGM_EXPORTER_DEBUG",),
             help="log at debug level"),
        flag("--log-format", field="log_format", parse=choice("text", "json"), default="text",
             env=("DCGM_EXPORTER_LOG_FORMAT",), help="log format"),
        flag("--enable-gpu-bind-unbind-watch", field="bind_watch", parse=boolean, default="false", switch=True,
             env=("DCGM_EXPORTER_ENABLE_GPU_BIND_UNBIND_WATCH",), help="watch for GPUs bound to or unbound from "
             "the nvidia driver (/sys/bus/pci/drivers/nvidia) and enumerate them again without a restart"),
        flag("--gpu-bind-unbind-poll-interval", field="bind_poll_interval", parse=duration(0.1, 3600, "100ms to 1h"),
             default="1s", env=("DCGM_EXPORTER_GPU_BIND_UNBIND_POLL_INTERVAL",),
             help="how often bound GPUs are listed, as a duration (1s, 500ms)"),
        flag("--dump-enabled", field="dump_enabled", parse=boolean, default="false", switch=True,
             env=("DCGM_EXPORTER_DUMP_ENABLED",), help="write a debug dump (the served series and the GPUs read) "
             "as JSON files on scrapes, as dcgm-exporter does"),
        flag("--dump-directory", field="dump_directory", default="/tmp/dcgm-exporter-debug",
             env=("DCGM_EXPORTER_DUMP_DIRECTORY",), help="directory of the debug dumps"),
        flag("--dump-retention", field="dump_retention", parse=integer(0, 87_600), default="24",
             env=("DCGM_EXPORTER_DUMP_RETENTION",), help="hours a debug dump is kept (0: never removed)"),
        flag("--dump-compression", field="dump_compression", parse=boolean, default="true", switch=True,
             env=("DCGM_EXPORTER_DUMP_COMPRESSION",), help="gzip the debug dumps"),
        flag("--web-config-file", field="web_config_file", parse=optional_text, env=("DCGM_EXPORTER_WEB_CONFIG_FILE",),
             help="Prometheus exporter-toolkit web configuration file: TLS, client certificates, basic auth, headers "
             "and a rate limit on every endpoint; re-read when it or a file it names changes"),
        # dcgm-exporter's flags this collector does not act on: accepted so that its manifests keep working, and
        # each one given is named at start with the reason
        flag("--kubernetes-gpu-id-type", parse=choice("uid", "device-name"),
             env=("DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE",), help="how the kubelet names GPUs",
             ignored="GPU UUIDs and nvidiaN device names are both recognised"),
        flag("--kubernetes-virtual-gpus", env=("KUBERNETES_VIRTUAL_GPUS",), help="per-pod shared GPUs",
             ignored="shared (time-sliced or MPS) GPUs are always attributed per pod"),
        flag("-d", "--devices", env=("DCGM_EXPORTER_DEVICES_STR",), help="",
             ignored="every GPU and MIG instance is read"),
        flag("-s", "--switch-devices", env=("DCGM_EXPORTER_OTHER_DEVICES_STR",), help="",
             ignored="it selects NVSwitches, which DCGM reads; this collector reads GPUs only and serves no "
             "NVSwitch series"),
        flag("-p", "--cpu-devices", env=("DCGM_EXPORTER_CPU_DEVICES_STR",), help="",
             ignored="it selects CPUs, which DCGM reads; this collector reads GPUs only and serves no CPU series"),
        flag("-x", "--xid-count-window-size", field="xid_window", parse=milliseconds(1, 2**31 - 1), default="300000",
             env=("DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE",), help="milliseconds over which DCGM_EXP_XID_ERRORS_COUNT "
             "counts XID errors"),
        flag("--clock-events-count-window-size", field="clock_events_window", parse=milliseconds(1, 2**31 - 1),
             default="300000", env=("DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE",), help="milliseconds over which "
             "DCGM_EXP_CLOCK_EVENTS_COUNT counts clock events (one sample of the reasons each collection interval)"),
        flag("--enable-dcgm-log", env=("DCGM_EXPORTER_ENABLE_DCGM_LOG",), help="", ignored=_NO_DCGM_LOG),
        flag("--dcgm-log-level", env=("DCGM_EXPORTER_DCGM_LOG_LEVEL",), help="", ignored=_NO_DCGM_LOG),
        flag("--fake-gpus", env=("DCGM_EXPORTER_USE_FAKE_GPUS",), help="",
             ignored="it lets DCGM accept its injected test GPUs, and no DCGM is used; --simulate-gpus N serves "
             "simulated GPUs"),
        flag("--web-systemd-socket", env=("DCGM_EXPORTER_SYSTEMD_SOCKET",), help="",
             ignored="systemd socket activation is not supported; the collector listens on --address itself"),
        flag("--disable-startup-validate", env=("DISABLE_STARTUP_VALIDATE",), help="",
             ignored="dcgm-exporter checks at start that libdcgm.so.4 is installed; this collector loads no DCGM, "
             "so there is nothing to skip (NVML is started, and retried, by the collection itself)"),
        flag("--enable-pprof", env=("DCGM_EXPORTER_ENABLE_PPROF",), help="",
             ignored="/debug/pprof serves Go runtime profiles and this collector is a Python program; profile it "
             "from outside with py-spy (py-spy dump --pid <pid>)"),
    ],
    version=True,
)  # fmt: skip


@dataclass(frozen=True)
class Settings:
    collectors: str | None = FLAGS.default("collectors")
    config_file: str | None = FLAGS.default("config-file")
    inline_counters: str | None = None  # --config-file's metrics.fields, as counters-file text
    config_without_effect: tuple[str, ...] = ()  # --config-file's keys that this collector does not act on
    address: tuple[str, int] = FLAGS.default("address")
    interval: float = FLAGS.default("collect-interval")
    slow_interval: float = FLAGS.default("slow-fields-interval")
    engine_interval: float = FLAGS.default("engine-utilization-interval")
    xid_window: float = FLAGS.default("xid-count-window-size")
    clock_events_window: float = FLAGS.default("clock-events-count-window-size")
    kubernetes: bool = FLAGS.default("kubernetes")
    configmap: ConfigMapRef | None = None  # --configmap-data's default, "none"
    dcgm_names: str = FLAGS.default("dcgm-names")
    configmap_refresh: float = FLAGS.default("configmap-refresh")
    old_namespace: bool = FLAGS.default("use-old-namespace")
    remote_hostengine: str | None = FLAGS.default("remote-hostengine-info")
    hostname_label: str = FLAGS.default("hostname-label")
    bind_watch: bool = FLAGS.default("enable-gpu-bind-unbind-watch")
    bind_poll_interval: float = FLAGS.default("gpu-bind-unbind-poll-interval")
    dump_enabled: bool = FLAGS.default("dump-enabled")
    dump_directory: str = FLAGS.default("dump-directory")
    dump_retention: int = FLAGS.default("dump-retention")
    dump_compression: bool = FLAGS.default("dump-compression")
    pod_resources_socket: str = FLAGS.default("pod-resources-kubelet-socket")
    pod_resources_refresh: float = FLAGS.default("pod-resources-refresh")
    pod_resources_timeout: float = FLAGS.default("pod-resources-timeout")
    shared_window: float = FLAGS.default("shared-window")
    proc_root: str = FLAGS.default("proc-root")
    kubeconfig: str | None = FLAGS.default("kubeconfig")
    resource_names: tuple[str, ...] = FLAGS.default("nvidia-resource-names")
    pod_labels: bool = FLAGS.default("kubernetes-enable-pod-labels")
    pod_label_allowlist: tuple[Pattern, ...] = FLAGS.default("kubernetes-pod-label-allowlist-regex")
    pod_uid: bool = FLAGS.default("kubernetes-enable-pod-uid")
    dra: bool = FLAGS.default("kubernetes-enable-dra")
    hpc_job_mapping_dir: str | None = FLAGS.default("hpc-job-mapping-dir")
    no_hostname: bool = FLAGS.default("no-hostname")
    replace_blanks: bool = FLAGS.default("replace-blanks-in-model-name")
    simulate_gpus: int = FLAGS.default("simulate-gpus")
    simulate_spec: str | None = FLAGS.default("simulate-spec")
    fallback_simulated_gpus: int = FLAGS.default("fallback-simulated-gpus")
    debug: bool = FLAGS.default("debug")
    log_format: str = FLAGS.default("log-format")
    web_config_file: str | None = FLAGS.default("web-config-file")
    node_name: str = ""  # $NODE_NAME from the downward API, else the host name
    ignored: tuple[str, ...] = ()

    @property
    def host(self) -> str:
        return self.address[0]

    @property
    def port(self) -> int:
        return self.address[1]

    @property
    def hostname(self) -> str | None:
        """The host label's value, as dcgm-exporter sets it: the node name, or outside Kubernetes the host of
        ``-r``; None with ``-n``."""
        if self.no_hostname:
            return None
        if self.remote_hostengine and not self.kubernetes:
            return remote_host(self.remote_hostengine)
        return self.node_name


def build_parser() -> argparse.ArgumentParser:
    return FLAGS.parser()


def as_go_reads_them(argv: Sequence[str]) -> list[str]:
    """The arguments as dcgm-exporter's flag parsing (Go's ``flag`` package, under urfave/cli) reads them: a name
    takes one dash or two, so ``-debug`` is ``--debug`` and ``--f`` is ``-f``. argparse would read ``-debug`` as
    ``-d ebug`` (the devices flag) and refuse ``--f``."""
    # each name to the spelling the table declares: dcgm-exporter's -rbmn is declared with one dash, as it spells it
    spelling = {n.lstrip("-"): n for f in FLAGS.flags.values() for n in f.names}
    spelling |= {"v": "-v", "version": "--version", "h": "-h", "help": "--help"}
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == "--":
            break
        name, equals, value = arg.lstrip("-").partition("=")
        if not arg.startswith("-") or arg.startswith("---") or name not in spelling:
            continue
        out[i] = spelling[name] + equals + value
    return out


def parse_settings(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """Settings from flags and environment; a bad value ends the process with status 2, naming it and the range."""
    env = os.environ if env is None else env
    try:
        values = FLAGS.read(as_go_reads_them(sys.argv[1:] if argv is None else argv), env)
    except FlagError as e:
        print(usage_error(FLAGS.prog, str(e)), file=sys.stderr)
        sys.exit(2)
    fields = values.fields()
    if fields["config_file"]:
        try:
            # imported here: the file is YAML, and a collector given none loads no YAML parser
            from collector.config_file import load_config_file

            fields |= from_config_file(load_config_file(fields["config_file"]), values.given)
        except ConfigError as e:
            print(usage_error(FLAGS.prog, str(e)), file=sys.stderr)
            sys.exit(2)
    return Settings(**fields, node_name=env.get("NODE_NAME") or socket.gethostname(), ignored=values.ignored)


def from_config_file(config: ConfigFile, given: frozenset[str]) -> dict[str, object]:
    """The settings ``--config-file`` gives, below the flags and variables given (dcgm-exporter's precedence:
    flags, then variables, then the file, then the defaults); ``-f`` or ``-m`` given replaces its counters."""
    out: dict[str, object] = {"config_without_effect": config.without_effect}
    if "collectors" not in given and "configmap-data" not in given:
        if config.collectors is not None:
            out["collectors"] = config.collectors
        if config.inline_counters is not None:
            out["inline_counters"] = config.inline_counters
    if config.interval_ms is not None and "collect-interval" not in given:
        out["interval"] = config.interval_ms / 1000
    if config.bind_watch is not None and "enable-gpu-bind-unbind-watch" not in given:
        out["bind_watch"] = config.bind_watch
    if config.bind_poll_interval is not None and "gpu-bind-unbind-poll-interval" not in given:
        out["bind_poll_interval"] = config.bind_poll_interval
    return out
