#!/bin/sh
# zeusd's entrypoint in the image docker/zeusd/Dockerfile builds. Before zeusd starts:
#
# 1. The node's GPU table beside the socket (gpus.csv: index, UUID, PCI address, as
#    nvidia-smi writes them), where the socket is shared. zeusd 0.5.0's /discover names its GPUs
#    only by index; a task whose container was given a GPU by UUID (the Kubernetes device
#    plugin's default) finds the daemon's index for it there (docs/devices.md, "Which GPUs").
# 2. The API groups: `serve` without --enable gets gpu-control and gpu-read, and cpu-read
#    where this build of zeusd can read the host's RAPL, so that a node without RAPL (a VM,
#    ARM) still serves its GPUs. zeusd 0.5.0 reads RAPL under /sys only; later builds also
#    under /zeus_sys (upstream's container convention). The image records which at build time
#    (ZEUSD_READS_ZEUS_SYS, from the source). ZEUSD_ENABLE overrides the choice.
# 3. A socket file that nothing listens on (a zeusd killed, for memory say, leaves it behind)
#    is removed: zeusd 0.5.0 refuses to start while its socket file exists (startup.rs,
#    get_listener: "Socket file ... already exists"), so the pod would crash-loop until someone
#    deleted it. A socket a live zeusd answers on is left alone, and zeusd then says why it
#    cannot start.
# ZEUSD_ENTRYPOINT_ROOT puts / elsewhere for the paths it looks at (tests only).
set -eu
root=${ZEUSD_ENTRYPOINT_ROOT:-}

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

if [ -S "$socket_path" ]; then
    # perl-base is in every Debian image: a connect tells a live daemon from a leftover file.
    if perl -MIO::Socket::UNIX -e 'exit(IO::Socket::UNIX->new(Peer => $ARGV[0]) ? 0 : 1)' \
        "$socket_path" 2>/dev/null; then
        echo "zeusd-entrypoint: a zeusd already answers on $socket_path: it is left alone" >&2
    else
        rm -f "$socket_path"
        echo "zeusd-entrypoint: removed $socket_path, which nothing listens on" >&2
    fi
fi

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
    reads_zeus_sys=${ZEUSD_READS_ZEUS_SYS:-$(cat /usr/local/share/zeusd/reads-zeus-sys 2>/dev/null || echo 0)}
    if [ -d "$root/sys/class/powercap/intel-rapl" ] \
        || { [ "$reads_zeus_sys" = 1 ] && [ -d "$root/zeus_sys/class/powercap/intel-rapl" ]; }; then
        groups=$groups,cpu-read
    elif [ -d "$root/zeus_sys/class/powercap/intel-rapl" ]; then
        echo "zeusd-entrypoint: RAPL is under /zeus_sys, which this zeusd does not read" \
            "(0.5.0 reads /sys only): cpu-read is not served" >&2
    else
        echo "zeusd-entrypoint: no RAPL visible: cpu-read is not served" >&2
    fi
fi
echo "zeusd-entrypoint: serving $groups" >&2
exec zeusd "$@" --enable "$groups"
