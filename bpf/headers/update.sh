#!/bin/sh
# Refreshes the vendored libbpf headers from the installed libbpf-dev package and
# records the version they came from. Run from this directory.
set -eu
version=$(dpkg-query -W -f='${Version}' libbpf-dev)
for f in bpf_helpers.h bpf_helper_defs.h bpf_tracing.h bpf_core_read.h; do
	cp "/usr/include/bpf/$f" .
done
echo "libbpf-dev $version" > LIBBPF_VERSION
