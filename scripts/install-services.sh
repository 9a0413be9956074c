#!/usr/bin/env bash
# Installs the real servers the test suite starts on loopback (PostgreSQL, Redis, ClickHouse, sshd).
# Only installs; the tests start and stop their own instances on free ports.
set -euo pipefail
need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v redis-sentinel >/dev/null || need+=(redis-sentinel)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v clickhouse-server >/dev/null || command -v clickhouse >/dev/null || need+=(clickhouse-server)
test -x /usr/sbin/sshd || need+=(openssh-server)
command -v chromium >/dev/null || need+=(chromium)
# host network and resource faults: nftables/tc in network namespaces the tests create, libfaketime
command -v nft >/dev/null || need+=(nftables)
command -v iptables >/dev/null || need+=(iptables)
command -v ip >/dev/null || need+=(iproute2)
command -v ping >/dev/null || need+=(iputils-ping)
ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || need+=(libfaketime)
if ((${#need[@]})); then
  if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
echo "services installed: postgresql redis-server redis-sentinel clickhouse-server openssh-server chromium nftables iptables iproute2 libfaketime"
