#!/usr/bin/env bash
# Installs the servers idem's tests use, from Debian's packages, when they are
# missing: PostgreSQL, MariaDB, Redis and RabbitMQ. NATS and Kafka run
# in-process.
# Needs root (or sudo); runs `apt-get update` once, only if something is missing.
set -euo pipefail

need=()
have_pg() {
	command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1
}
have_pg || need+=(postgresql)
{ command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || [ -x /usr/sbin/mysqld ]; } || need+=(mariadb-server)
{ command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ]; } || need+=(redis-server)
{ command -v rabbitmq-server >/dev/null 2>&1 || [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; } || need+=(rabbitmq-server)

if [ ${#need[@]} -eq 0 ]; then
	exit 0
fi
echo "install-deps: installing ${need[*]} from Debian's packages"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null 2>&1; then
		sudo="sudo"
	else
		echo "install-deps: not root and no sudo; install them yourself: apt-get install -y ${need[*]}" >&2
		exit 1
	fi
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# The packages' own services are not needed (tests start throwaway servers);
# policy-rc.d may refuse to start them, which is fine.
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
