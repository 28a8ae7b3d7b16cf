# Sourced by the GPU node scripts (REPO set to the repository root): the Python path for the
# harness, with wheels of what the node lacks (fabric, paramiko, invoke, optuna and their needs)
# installed from .whl/ when the repository carries them.
if [ -d "$REPO/.whl" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$REPO"/.whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$REPO
else
  export PYTHONPATH=$REPO
fi
export PYTHONUNBUFFERED=1 COLUMNS=160

node_target() {  # node_target FILE [DEVICES]: targets.yaml with the node itself (sm90, 132 SMs), local transport
  cat > "$1" <<YAML
node:
  description: the GPU node itself (local transport)
  backend: cuda
  arch: x86_64
  gpu_arch: 90
  shared_mem_max: 232448
  multiprocessors: 132
  profiler: events
YAML
  if [ -n "${2:-}" ]; then echo "  devices: \"$2\"" >> "$1"; fi
}
