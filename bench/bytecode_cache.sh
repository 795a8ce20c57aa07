# Sourced: every module the collector and the benchmarks import gets its bytecode cached, as the image has it (pip
# compiles the packages it installs, the Dockerfile the standard library), in $PYTHONPYCACHEPREFIX, which the
# processes started afterwards read. For a machine whose Python has no bytecode and writes none: there every start
# compiles every module it imports, and what compiling takes partly stays resident (docs/collector-bench.md).
export PYTHONPYCACHEPREFIX=${TMPDIR:-/tmp}/gpuscale-bytecode
unset PYTHONDONTWRITEBYTECODE
python3 -m compileall -q -j0 -x /site-packages/ "$(python3 -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')" \
  > /dev/null 2>&1
python3 -m compileall -q -j0 collector common harness bench loadgen adapter $(python3 -c 'import os, importlib.util as u
for s in map(u.find_spec, ("pynvml", "prometheus_client", "h11", "h2", "hpack", "hyperframe", "cachetools", "yaml")):
    print(os.path.dirname(s.origin) if s.submodule_search_locations else s.origin)') > /dev/null 2>&1
