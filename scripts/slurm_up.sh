#!/usr/bin/env bash
# Bring up a single-node Slurm (slurm-wlm + munge) on a Debian machine, as root, without systemd.
#
#   sudo bash scripts/slurm_up.sh            # install if needed, configure, start; idempotent
#   sinfo && squeue                          # the node is "idle" once it is up
#
# One partition, `debug` (default, no time limit), holding this machine with all its cores and ~90% of its memory.
# What it does follows ../shared/notes/slurm.md: munged as the munge user, then slurmctld, then slurmd. Daemons
# started by hand do not outlive the machine, so CI (.ci/run) runs this before the tests marked `slurm`.
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
    echo "error: bringing up Slurm needs root (run: sudo bash $0)" >&2
    exit 2
fi

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq slurm-wlm munge >/dev/null
fi

host="$(hostname -s)"
cpus="$(nproc)"
mem_mib="$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)"

mkdir -p /run/munge /var/log/munge /var/lib/munge /etc/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge
chmod 0755 /run/munge
if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
fi
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key

mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
chown slurm:slurm /var/spool/slurmctld /var/log/slurm
cat > /etc/slurm/slurm.conf <<EOF
# Written by pe-bench scripts/slurm_up.sh: a single-node cluster on ${host}.
ClusterName=local
SlurmctldHost=${host}
SlurmUser=slurm
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MaxArraySize=10001
NodeName=${host} CPUs=${cpus} RealMemory=${mem_mib} State=UNKNOWN
PartitionName=debug Nodes=${host} Default=YES MaxTime=INFINITE State=UP
EOF

pgrep -x munged >/dev/null || su -s /bin/sh munge -c /usr/sbin/munged
pgrep -x slurmctld >/dev/null || /usr/sbin/slurmctld
pgrep -x slurmd >/dev/null || /usr/sbin/slurmd

for _ in $(seq 1 60); do
    if sinfo -h -o "%t" 2>/dev/null | grep -qE "^(idle|mix|alloc)"; then
        echo "slurm is up: $(sinfo -h -o '%P %D node(s) %c cpus %m MiB %t')"
        exit 0
    fi
    scontrol update nodename="${host}" state=resume >/dev/null 2>&1 || true
    sleep 1
done
echo "error: Slurm did not come up within 60 s; see /var/log/slurm/slurmctld.log and slurmd.log" >&2
exit 1
