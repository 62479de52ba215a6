#!/bin/busybox sh
# PID 1 of the soft-RoCE guest built by `cargo xtask rdma-vm`: sets up rxe0/rxe1
# over a veth pair, runs faultline's collector and correlator against real
# perftest traffic, and prints everything the host checks between
# "=== BEGIN <name>" / "=== END <name>" markers on the serial console.
#
# Busybox's shell runs its own applets before $PATH, so iproute2's ip/tc are
# called by full path (busybox's `ip` cannot create veth pairs).
/bin/busybox --install -s /bin
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
IP=/usr/bin/ip
TC=/usr/sbin/tc
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tracefs tracefs /sys/kernel/tracing
mount -t debugfs debugfs /sys/kernel/debug
mount -t bpf bpf /sys/fs/bpf
mkdir -p /sys/fs/cgroup && mount -t cgroup2 cgroup2 /sys/fs/cgroup
mkdir -p /tmp /run /var/lib/faultline && mount -t tmpfs tmpfs /tmp
hostname rxe-guest
WINDOW=2
for arg in $(cat /proc/cmdline); do
  case "$arg" in faultline.window=*) WINDOW=${arg#faultline.window=} ;; esac
done

step() { echo "=== STEP $(date +%s) $*"; }
section() { echo "=== BEGIN $1"; cat "$2"; echo "=== END $1"; }
finish() {
  step "finish"
  kill "$COLL" 2>/dev/null
  # wait for the collector's last window (SIGTERM closes it)
  for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$COLL" 2>/dev/null || break; sleep 1; done
  sleep 2
  kill "$SUBS" "$CORR" 2>/dev/null
  section collector.log /tmp/collector.log
  section correlator.log /tmp/correlator.log
  section windows.jsonl /tmp/windows.jsonl
  section candidates.jsonl /tmp/candidates.jsonl
  section metrics /tmp/metrics.txt
  echo "=== GUEST DONE"
  poweroff -f
}

case " $(cat /proc/cmdline) " in
  *" faultline.probe=1 "*) echo "=== GUEST PROBE OK"; poweroff -f ;;
esac

step "modules"
for m in /lib/modules/faultline/*.ko; do insmod "$m" || echo "insmod $m failed"; done

step "network"
# Two rxe devices in one namespace: rxe0 on veth0 (192.0.2.1), rxe1 on veth1
# (192.0.2.2). Policy routing makes the two addresses behave like two hosts:
# locally generated packets to .2 leave through veth0 from .1 and packets to
# .1 leave through veth1 from .2, instead of short-cutting through lo. So RoCE
# traffic between the devices crosses veth0, where netem acts (rxe would
# otherwise loop it back inside the driver).
$IP link set lo up
$IP link add veth0 type veth peer name veth1
$IP addr add 192.0.2.1/24 dev veth0
$IP addr add 192.0.2.2/24 dev veth1
$IP link set veth0 up
$IP link set veth1 up
for i in all default veth0 veth1; do
  echo 1 > /proc/sys/net/ipv4/conf/$i/accept_local
  echo 0 > /proc/sys/net/ipv4/conf/$i/rp_filter
done
# veth hands a packet to the backlog of the CPU that sent it, so a QP whose
# requester runs on both vCPUs (posts on one, retransmit timer on the other)
# reaches the responder out of order: measured here as ~1.5e-3 sequence
# NAKs per packet on a healthy "wire" once the host is busy, 1/5 of what
# 5 % loss gives. A real NIC keeps a flow in order; steering both veths'
# receive to CPU 0 (RPS) does the same here.
for d in veth0 veth1; do echo 1 > /sys/class/net/$d/queues/rx-0/rps_cpus; done
$IP rule add pref 10 to 192.0.2.2 iif lo lookup 100
$IP rule add pref 11 to 192.0.2.1 iif lo lookup 101
# A link going down drops its static routes: called again after `link up`.
wire_routes() {
  $IP route replace 192.0.2.2 dev veth0 src 192.0.2.1 table 100
  $IP route replace 192.0.2.1 dev veth1 src 192.0.2.2 table 101
}
wire_routes
$IP rule del pref 0
$IP rule add pref 1000 lookup local
rdma link add rxe0 type rxe netdev veth0
rdma link add rxe1 type rxe netdev veth1
rdma link
ibv_devinfo -v -d rxe0 > /tmp/devinfo.txt 2>&1
section ibv_devinfo /tmp/devinfo.txt

step "start correlator"
faultline-correlator serve --insecure --listen 127.0.0.1:50051 > /tmp/correlator.log 2>&1 &
CORR=$!
sleep 1
faultline-correlator subscribe --endpoint http://127.0.0.1:50051 --json > /tmp/candidates.jsonl 2>/tmp/subscribe.log &
SUBS=$!

step "start collector"
faultline-collector --window "$WINDOW" --correlator http://127.0.0.1:50051 \
  --record /tmp/windows.jsonl --spool-dir /var/lib/faultline/spool --no-cuda --no-nvml \
  > /tmp/collector.log 2>&1 &
COLL=$!
for _ in $(seq 1 180); do
  wget -q -O /dev/null http://127.0.0.1:9477/readyz 2>/dev/null && break
  sleep 1
done
step "collector ready"
cat /tmp/collector.log

# Phase 1: healthy traffic, then packet loss on veth0, then healthy again,
# all in one perftest run (server on rxe1, client on rxe0).
step "traffic start"
# QP timeout 16 (4.096 us * 2^16 = 268 ms): with perftest's default of 14
# (67 ms) a slow emulated guest already retransmits on ACKs that are merely
# late, which blurs the healthy baseline (measured here: 3e-4 vs 6e-5 retries
# per packet healthy, 1.5e-2 vs 1e-2 with 5 % loss).
timeout 120 ib_write_bw -d rxe1 -x 1 -u 16 -D 60 > /tmp/bw-server.log 2>&1 &
BWS=$!
sleep 1
# The client runs as Slurm job 4242 rank 0: /metrics sums verbs counts by
# job and rank (never by pid), and keeps an exited process's last counts.
SLURM_JOB_ID=4242 SLURM_PROCID=0 \
  timeout 120 ib_write_bw -d rxe0 -x 1 -u 16 -D 60 192.0.2.2 > /tmp/bw-client.log 2>&1 &
BWC=$!
sleep 16
step "loss on"
$TC qdisc add dev veth0 root netem loss 5%
sleep 16
step "loss off"
$TC -s qdisc show dev veth0
$TC qdisc del dev veth0 root
wait $BWC
echo "client exit $?"
wait $BWS
step "traffic end"
section softnet_stat /proc/net/softnet_stat
section bw-client /tmp/bw-client.log

# Phase 2: the link goes down and up (async events PORT_ERR / PORT_ACTIVE).
sleep "$WINDOW"
step "link down"
$IP link set veth0 down
sleep 4
step "link up"
$IP link set veth0 up
wire_routes
sleep 6

# Phase 3: the server dies mid-transfer: the client's QP retries, then its
# work requests complete with IBV_WC_RETRY_EXC_ERR / IBV_WC_WR_FLUSH_ERR.
# rdma_cm mode (-R) because only there perftest sets the retry count: rxe
# retries forever with the default of 7.
step "kill server start"
timeout 60 ib_write_bw -d rxe1 -R --source_ip 192.0.2.2 -D 30 --retry_count=2 -u 12 > /tmp/bw-server2.log 2>&1 &
SRV=$!
sleep 2
timeout 60 ib_write_bw -d rxe0 -R --source_ip 192.0.2.1 -D 30 --retry_count=2 -u 12 192.0.2.2 > /tmp/bw-client2.log 2>&1 &
CLI=$!
echo "=== CLIENT_PID $CLI"
sleep 5
# Which device each QP is on (rdma_cm chooses it from the route).
{ $IP route get 192.0.2.2; rdma resource show qp; rdma resource show cm_id; } > /tmp/qps.txt 2>&1
section qps /tmp/qps.txt
step "kill server"
kill -9 $SRV
wait $CLI
echo "client2 exit $?"
section bw-client2 /tmp/bw-client2.log
sleep $((WINDOW * 2))
wget -q -O /tmp/metrics.txt http://127.0.0.1:9477/metrics
finish
