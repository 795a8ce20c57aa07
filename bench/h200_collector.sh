#!/usr/bin/env bash
# The collector on a real GPU: record the NVML trace the tests replay, validate every load kind against the
# collector's /metrics, time each NVML call and each stage of a cycle, benchmark scrape latency and collection CPU,
# measure freshness through Prometheus and the adapter, the collector's memory as deployed (-k in a pod) and what a
# thread costs there, and split a shared GPU by pod.
# Writes results under ${OUT:-out}/.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
# bytecode as the image has it: this machine's Python neither finds nor writes it (bench/bytecode_cache.sh)
source bench/bytecode_cache.sh
nvidia-smi -L | tee "$OUT/machine.txt"; nvidia-smi --query-gpu=driver_version,name,memory.total --format=csv >> "$OUT/machine.txt"
# the kernel (Firecracker's Linux or gVisor's 4.4.0) and transparent huge pages decide what a thread's stack costs
{ echo "kernel $(uname -r)"; echo "THP $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>&1)"; } >> "$OUT/machine.txt"
python3 -m harness.node.record_trace "$OUT/h200.json" 2>&1 | tail -3
python3 -m collector -a 127.0.0.1:9400 > "$OUT/collector.log" 2>&1 &
COLLECTOR=$!
sleep 3
for kind in gemm-bf16 gemm-fp16 fp32 fp64 memory; do
  secs=12; [ "$kind" = gemm-bf16 ] && secs=20
  echo "## $kind" >> "$OUT/validate.md"
  python3 -m loadgen validate --kind $kind --seconds $secs --idle-seconds 3 >> "$OUT/validate.md" 2>&1
  echo "exit $?" >> "$OUT/validate.md"
done
kill $COLLECTOR
python3 -m bench.nvml_costs --repeat 50 --cycles 20 > "$OUT/nvml_costs.md" 2>&1
python3 -m bench.collector_bench --simulate '' --real --default-file --requests 1000 --collect-seconds 20 > "$OUT/bench.md" 2>&1
python3 -m bench.freshness --runs 5 --load-seconds 18 --tail 7 > "$OUT/freshness.md" 2>&1
python3 -m bench.collector_memory --real --counters dcgm-exporter --scrapes 1000 --cycles 20 --mappings 12 \
  --case 'no -k' --case 'in a pod, -k::-k --kubernetes-enable-pod-labels' \
  --case 'in a pod, -k, no bytecode:PYTHONDONTWRITEBYTECODE=1,PYTHONPYCACHEPREFIX=/nonexistent:-k --kubernetes-enable-pod-labels' \
  > "$OUT/memory.md" 2>&1
python3 -m bench.thread_cost >> "$OUT/memory.md" 2>&1  # what a thread's stack costs on this machine's kernel
for period in 1.0 0.1; do python3 -m bench.h200_shared --period $period --seconds 36 >> "$OUT/shared.md" 2>&1; done
cat "$OUT/validate.md" "$OUT/nvml_costs.md" "$OUT/bench.md" "$OUT/freshness.md" "$OUT/memory.md" "$OUT/shared.md"
