#!/bin/bash
# two_hosts.sh <program> [args...]
#
# Runs one `mpirun -np 2` job (Open MPI 4.1) with rank 0 in network namespace A (10.77.0.1,
# where mpirun runs) and rank 1 in namespace B (10.77.0.2), joined by a veth pair: two hosts
# talking over TCP. No ssh: the remote orted is started by a generated plm_rsh_agent that
# runs `ip netns exec <ns> sh -c "<command>"`. Open MPI calls the agent as it would call ssh,
# with the command's words shell-quoted, so the agent re-joins them for a shell as sshd does.
#
# Exit code: that of mpirun (first non-zero rank exit status, or 0);
#            124/137 if it ran past TWO_HOSTS_TIMEOUT; 77 = skipped.
# Env knobs:
#   TWO_HOSTS_TIMEOUT=60        seconds before mpirun is killed (TERM, KILL +5s)
#   TWO_HOSTS_MPIRUN_ARGS="..." extra mpirun options (e.g. "-x FOO --tag-output")
#   TWO_HOSTS_CLEAN_ENV=1       agent starts remote orted with an ssh-like clean
#                               environment (then non-OMPI_* vars need -x)
#   TWO_HOSTS_VERBOSE=1         print veth byte counters and namespace ids
set -u

skip() { echo "skipped: $*" >&2; exit 77; }

[ $# -ge 1 ] || { echo "usage: $0 <program> [args...]" >&2; exit 2; }
command -v mpirun >/dev/null 2>&1 || skip "mpirun not found"
command -v ip >/dev/null 2>&1 || skip "ip (iproute2) not found"
[ "$(id -u)" = 0 ] || skip "must run as root to create network namespaces"

TIMEOUT=${TWO_HOSTS_TIMEOUT:-60}
SUF=$$
NSA=ompiA_$SUF NSB=ompiB_$SUF
IPA=10.77.0.1 IPB=10.77.0.2 NET=10.77.0.0/24
TMPD=

cleanup() {
    local ns p
    for ns in "$NSA" "$NSB"; do
        # Kill anything left in the namespace (an orphaned remote orted keeps
        # running after mpirun is killed and ignores SIGTERM).
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
        ip netns del "$ns" 2>/dev/null   # also destroys the veth pair
    done
    [ -n "$TMPD" ] && rm -rf "$TMPD"
}
CHILD=
on_signal() {   # forward to timeout (which forwards to mpirun), wait, clean up
    trap '' INT TERM HUP
    [ -n "$CHILD" ] && { kill -s "$1" "$CHILD" 2>/dev/null; wait "$CHILD" 2>/dev/null; }
    exit "$2"
}
trap cleanup EXIT
trap 'on_signal INT 130' INT
trap 'on_signal TERM 143' TERM
trap 'on_signal HUP 129' HUP

ip netns add "$NSA" 2>/dev/null || skip "cannot create network namespace (ip netns add failed)"
ip netns add "$NSB" 2>/dev/null || skip "cannot create second network namespace"
ip link add vethA netns "$NSA" type veth peer name vethB netns "$NSB" 2>/dev/null \
    || skip "cannot create veth pair"
ip -n "$NSA" addr add $IPA/24 dev vethA && ip -n "$NSB" addr add $IPB/24 dev vethB &&
# lo MUST be up in both namespaces: with lo down Open MPI hangs silently
# (orted/ranks cannot reach the local PMIx server over loopback).
ip -n "$NSA" link set lo up && ip -n "$NSB" link set lo up &&
ip -n "$NSA" link set vethA up && ip -n "$NSB" link set vethB up \
    || skip "cannot configure veth/loopback"

TMPD=$(mktemp -d "${TMPDIR:-/tmp}/two_hosts.XXXXXX") || skip "mktemp failed"
AGENT=$TMPD/agent
# Open MPI calls the agent like ssh: `agent <host> <orted command words...>`
# (no options unless plm_rsh_args is set; words contain shell quoting such as
# "env", so they must be re-joined and evaluated by a shell, as sshd does).
if [ "${TWO_HOSTS_CLEAN_ENV:-0}" = 1 ]; then
    ENVPFX="env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=${HOME:-/root}"
else
    ENVPFX=""
fi
cat >"$AGENT" <<EOF
#!/bin/sh
while [ \$# -gt 0 ]; do case \$1 in -*) shift;; *) break;; esac; done
host=\$1; shift
case \$host in
  $IPA) ns=$NSA;;
  $IPB) ns=$NSB;;
  *) echo "two_hosts agent: unknown host \$host" >&2; exit 255;;
esac
exec ip netns exec "\$ns" $ENVPFX sh -c "\$*"
EOF
chmod +x "$AGENT"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1

if [ "${TWO_HOSTS_VERBOSE:-0}" = 1 ]; then
    echo "two_hosts: $NSA=$(ip netns exec "$NSA" readlink /proc/self/ns/net) $NSB=$(ip netns exec "$NSB" readlink /proc/self/ns/net)" >&2
    rxb0=$(ip netns exec "$NSA" cat /sys/class/net/vethA/statistics/rx_bytes)
    txb0=$(ip netns exec "$NSA" cat /sys/class/net/vethA/statistics/tx_bytes)
fi

# Run in the background + `wait` so that a signal to this script is handled
# at once (bash defers traps until a foreground child exits); `<&0` keeps
# stdin (a background job would otherwise get /dev/null).
# shellcheck disable=SC2086
timeout -k 5 "$TIMEOUT" ip netns exec "$NSA" \
    mpirun -np 2 --host $IPA,$IPB --map-by node \
    --mca plm_rsh_agent "$AGENT" \
    --mca pml ob1 --mca btl tcp,self \
    --mca btl_tcp_if_include $NET --mca oob_tcp_if_include $NET \
    ${TWO_HOSTS_MPIRUN_ARGS:-} \
    "$@" <&0 &
CHILD=$!
T0=$SECONDS
wait "$CHILD"
rc=$?
CHILD=
# (137 is also what mpirun returns when a rank died of SIGKILL, so check time)
if { [ $rc = 124 ] || [ $rc = 137 ]; } && [ $((SECONDS - T0)) -ge "$TIMEOUT" ]; then
    echo "two_hosts: mpirun timed out after ${TIMEOUT}s (rc=$rc)" >&2
fi

if [ "${TWO_HOSTS_VERBOSE:-0}" = 1 ]; then
    rxb1=$(ip netns exec "$NSA" cat /sys/class/net/vethA/statistics/rx_bytes)
    txb1=$(ip netns exec "$NSA" cat /sys/class/net/vethA/statistics/tx_bytes)
    echo "two_hosts: vethA rx +$((rxb1 - rxb0)) bytes, tx +$((txb1 - txb0)) bytes; mpirun rc=$rc" >&2
fi
exit $rc
