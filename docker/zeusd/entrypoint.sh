#!/bin/sh
# zeusd's entrypoint in the image docker/zeusd/Dockerfile builds. Before zeusd starts:
#
# 1. The node's GPU table beside the socket (gpus.csv: index, UUID, PCI address, as
#    nvidia-smi writes them), where the socket is shared. zeusd 0.5.0's /discover names its GPUs
#    only by index; a task whose container was given a GPU by UUID (the Kubernetes device
#    plugin's default) finds the daemon's index for it there (docs/devices.md, "Which GPUs").
# 2. The API groups: `serve` without --enable gets gpu-control and gpu-read, and cpu-read
#    where the host's RAPL is visible (mounted under /zeus_sys, upstream's container
#    convention), so that a node without RAPL (a VM, ARM) still serves its GPUs. ZEUSD_ENABLE
#    overrides it (e.g. gpu-control,gpu-read where this zeusd build does not read /zeus_sys).
set -eu

if [ "${1:-}" != "serve" ]; then
    exec zeusd "$@"  # another subcommand (`token issue ...`): as is
fi

socket_path=/run/zeusd/zeusd.sock
previous=
for argument in "$@"; do
    if [ "$previous" = "--socket-path" ]; then
        socket_path=$argument
    fi
    previous=$argument
done
socket_dir=$(dirname "$socket_path")
mkdir -p "$socket_dir"

if command -v nvidia-smi >/dev/null 2>&1 \
    && nvidia-smi --query-gpu=index,uuid,pci.bus_id --format=csv,noheader \
        >"$socket_dir/gpus.csv.new" 2>/dev/null; then
    chmod 644 "$socket_dir/gpus.csv.new"
    mv "$socket_dir/gpus.csv.new" "$socket_dir/gpus.csv"
    echo "zeusd-entrypoint: the node's GPU table is in $socket_dir/gpus.csv" >&2
else
    rm -f "$socket_dir/gpus.csv.new"
    echo "zeusd-entrypoint: no nvidia-smi here: no GPU table written" >&2
fi

case " $* " in
    *" --enable "* | *" --enable="*)
        exec zeusd "$@"
        ;;
esac
groups=${ZEUSD_ENABLE:-}
if [ -z "$groups" ]; then
    groups=gpu-control,gpu-read
    if [ -d /zeus_sys/class/powercap/intel-rapl ] || [ -d /sys/class/powercap/intel-rapl ]; then
        groups=$groups,cpu-read
    else
        echo "zeusd-entrypoint: no RAPL visible: cpu-read is not served" >&2
    fi
fi
echo "zeusd-entrypoint: serving $groups" >&2
exec zeusd "$@" --enable "$groups"
