#!/usr/bin/env bash
# Installs the servers idem's tests use, from Debian's packages, when they are
# missing: PostgreSQL (with Patroni and etcd), MariaDB (with galera-4 and rsync), Redis, RabbitMQ and Chromium (headless, for the
# operator page's browser test). NATS and Kafka run
# in-process. dynalite (a DynamoDB-API server, for keystore/dynamostore) comes
# from npm, on Debian's nodejs, into /usr/local/lib/idem-dynalite, where
# internal/testsupport/testenv looks for it.
# Needs root (or sudo); runs `apt-get update` once, only if something is missing.
set -euo pipefail

need=()
have_pg() {
	command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1
}
have_pg || need+=(postgresql)
{ command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || [ -x /usr/sbin/mysqld ]; } || need+=(mariadb-server)
# A 3-node Galera cluster (internal/testsupport/testenv/galera.go): the provider library,
# and rsync for the state transfer to joining nodes.
{ [ -e /usr/lib/galera/libgalera_smm.so ] || [ -e /usr/lib/libgalera_smm.so ]; } || need+=(galera-4)
command -v rsync >/dev/null 2>&1 || need+=(rsync)
# PostgreSQL under Patroni with etcd (internal/testsupport/testenv/patroni.go).
command -v patroni >/dev/null 2>&1 || need+=(patroni)
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
{ command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ]; } || need+=(redis-server)
{ command -v rabbitmq-server >/dev/null 2>&1 || [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; } || need+=(rabbitmq-server)
# Headless Chromium drives the operator page's browser test (cmd/idem, chromedp).
{ command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; } || need+=(chromium)

# dynalite: keep the version in step with DynaliteVersion in internal/testsupport/testenv/dynalite.go.
dynalite_dir=/usr/local/lib/idem-dynalite
dynalite_version=4.0.0
have_dynalite() {
	[ -x "$dynalite_dir/node_modules/.bin/dynalite" ] &&
		grep -q "\"version\": \"$dynalite_version\"" "$dynalite_dir/node_modules/dynalite/package.json" 2>/dev/null
}
have_dynalite || { command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; } || need+=(nodejs npm)
install_dynalite() {
	have_dynalite && return 0
	echo "install-deps: installing dynalite@$dynalite_version from npm into $dynalite_dir"
	local s=""
	if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then s="sudo"; fi
	$s npm install --prefix "$dynalite_dir" --no-audit --no-fund --loglevel=error "dynalite@$dynalite_version" >/dev/null
}

if [ ${#need[@]} -eq 0 ]; then
	install_dynalite
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
install_dynalite
