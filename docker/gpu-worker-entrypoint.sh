#!/usr/bin/env bash
# Runs a GPU worker's command ("$@") as the airflow user, holding CAP_SYS_ADMIN when the
# container was granted it and nothing else.
#
# Why: setting a GPU power limit through NVML is a privileged driver call, and the NVIDIA
# driver checks CAP_SYS_ADMIN on every such call, not the user id. Docker hands capabilities
# from cap_add only to root, so the container starts as root (compose: user "0:0") and this
# script passes that one capability on as an ambient capability, which survives the switch to
# the airflow user and every exec below it (Celery worker -> task process).
#
# Without cap_add: [SYS_ADMIN] the worker starts all the same, without privileges; Zeus then
# trains at the GPUs' current power limits and says so in each task's log (measure mode).
set -euo pipefail

readonly CAP_SYS_ADMIN_BIT=21
readonly AIRFLOW_GID=0  # the official image's convention: any uid, group 0

if [[ "$(id -u)" != 0 ]]; then
    echo "zeus-airflow: started as uid $(id -u), not root: no capability to pass on;" \
         "GPU power limits stay as they are (measure mode)" >&2
    exec "$@"
fi

uid="${AIRFLOW_UID:-50000}"
# Started as root only to hand the capability over; the airflow user owns HOME, not root.
export HOME=/home/airflow
bounding=$((16#$(awk '/^CapBnd:/ {print $2}' /proc/self/status)))
if (( (bounding >> CAP_SYS_ADMIN_BIT) & 1 )); then
    echo "zeus-airflow: CAP_SYS_ADMIN granted: tasks may set GPU power limits" >&2
    exec setpriv --reuid="$uid" --regid="$AIRFLOW_GID" --clear-groups \
        --bounding-set=-all,+sys_admin --inh-caps=-all,+sys_admin \
        --ambient-caps=-all,+sys_admin -- "$@"
fi
echo "zeus-airflow: no CAP_SYS_ADMIN (compose: cap_add: [SYS_ADMIN]): GPU power limits stay" \
     "as they are; Zeus measures at the current limits (measure mode)" >&2
exec setpriv --reuid="$uid" --regid="$AIRFLOW_GID" --clear-groups \
    --bounding-set=-all --inh-caps=-all -- "$@"
